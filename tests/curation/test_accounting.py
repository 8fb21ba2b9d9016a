"""The one row-accounting object: counts drops by reason and refuses a broken identity."""

from __future__ import annotations

import pyarrow as pa
import pytest

from curation.accounting import RowAccount, RowAccountingError
from curation.versioning import write_versioned


def test_drops_add_up_and_a_lost_row_is_refused(tmp_path):
    account = RowAccount(10)
    account.drop("exact_duplicate", 2)
    account.drop_all(["gsm8k", "gsm8k", "humaneval"], prefix="contaminated:")
    account.drop("nothing", 0)
    assert account.check(5, "clean") == {"exact_duplicate": 2, "contaminated:gsm8k": 2, "contaminated:humaneval": 1}
    with pytest.raises(RowAccountingError, match=r"clean: row accounting broken: rows_in=10 != rows_out=4 \+ dropped=5"):
        account.check(4, "clean")
    with pytest.raises(RowAccountingError, match="negative"):
        account.drop("x", -1)
    table = pa.table({"a": [1, 2, 3]})  # the versioned write checks the same identity
    with pytest.raises(ValueError, match="row accounting broken"):
        write_versioned(table, tmp_path, "t", rows_in=4, dropped={}, inputs=[], code_version="c", config={})
    assert write_versioned(table, tmp_path, "t", rows_in=4, dropped={"x": 1}, inputs=[], code_version="c",
                           config={}).record["rows_out"] == 3
