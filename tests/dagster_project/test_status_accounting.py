"""The row accounting `cascade run` prints and `status --json` / `lineage --json` carry
(dagster_project.accounting), from lineage records written by the real dataset writer: a
source's raw read joined with its curated table, a stale curated table left out, a sharded
source's shard reads, corpora, and the table's layout."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from assets.common import accounting, top_reasons
from curation.versioning import write_versioned
from dagster_project.accounting import add_rows, corpus_row, format_table, record_rows, source_row

TABLE = pa.table({"prompt": ["a", "b", "c"]})


def _record(root: Path, asset: str, rows_out: int, dropped: dict[str, int], inputs: list | None = None,
            **details) -> dict:
    """A dataset record; one with `details` (a reader's) is read from a raw file, its `file_*` input."""
    raw_file = [{"asset": "file_s", "data_version": "f"}] if details else []
    out = write_versioned(TABLE.slice(0, rows_out), root, asset, rows_in=rows_out + sum(dropped.values()),
                          dropped=dropped, inputs=inputs or raw_file, code_version="c", config={}, details=details or None)
    return out.record


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    return tmp_path / "data"


def test_top_reasons_rank_by_count_then_name() -> None:
    assert top_reasons({"b": 2, "a": 2, "c": 5, "d": 1}) == ["c ×5", "a ×2", "b ×2"]
    assert top_reasons({}) == []


def test_a_records_drops_are_split_by_what_dropped_them(home: Path) -> None:
    raw = _record(home, "raw_s", 3, {"missing_field:messages": 4, "invalid_json": 1}, format="openai", reader="jsonl",
                  layouts={"openai": 3})
    rows = accounting(raw)
    assert (rows["rows_in"], rows["kept"], rows["quarantined"], rows["filtered"]) == (8, 3, 5, 0)
    assert (rows["format"], rows["reader"]) == ("openai", "jsonl")
    assert rows["top_reasons"] == ["missing_field:messages ×4", "invalid_json ×1"]
    corpus = accounting(_record(home, "sft_data", 2, {"contaminated:gsm8k": 1, "duplicate_example": 2, "too_long": 3}))
    assert (corpus["quarantined"], corpus["decontaminated"], corpus["deduplicated"], corpus["filtered"]) == (0, 1, 2, 3)


def test_a_source_row_joins_its_read_and_its_curated_table(home: Path) -> None:
    raw = _record(home, "raw_s", 3, {"missing_field:messages": 2}, format="openai", reader="jsonl",
                  layouts={"openai": 2, "sharegpt": 1})
    ref = {"asset": "raw_s", "data_version": raw["data_version"], "path": raw["path"]}
    clean = _record(home, "clean_s", 1, {"contaminated:leak": 1, "exact_duplicate": 1}, inputs=[ref])
    row = source_row("s", raw, clean)
    assert row == {"kind": "source", "name": "s", "layout": "openai+sharegpt", "reader": "jsonl", "rows_in": 5,
                   "quarantined": 2, "decontaminated": 1, "deduplicated": 1, "filtered": 0, "kept": 1,
                   "top_reasons": ["missing_field:messages ×2", "contaminated:leak ×1", "exact_duplicate ×1"]}
    # a curated table built from an earlier read is not this read's: its columns are left empty
    stale = _record(home, "clean_s", 2, {}, inputs=[{**ref, "data_version": "older"}])
    assert source_row("s", raw, stale) == {**row, "decontaminated": None, "deduplicated": None,
                                                 "filtered": None, "kept": 3, "top_reasons": ["missing_field:messages ×2"]}
    assert source_row("s", None, None) is None


def test_a_sharded_source_is_read_from_its_shard_records(home: Path) -> None:
    shards = [_record(home, f"clean_s_shards/{k}", 2, {"bad_role:x": 1, "contaminated:leak": k}, format="sharegpt",
                      reader="jsonl") for k in range(2)]
    clean = _record(home, "clean_s", 3, {"contaminated:leak": 1},
                    inputs=[{"asset": r["asset"], "data_version": r["data_version"], "path": r["path"]} for r in shards])
    row = source_row("s", None, clean)
    assert (row["rows_in"], row["quarantined"], row["decontaminated"], row["kept"], row["layout"]) == (7, 2, 1, 3, "sharegpt")
    assert row["top_reasons"] == ["bad_role:x ×2", "contaminated:leak ×1"]  # the shards' hits are the table's


def test_the_table_aligns_numbers_and_marks_missing_ones(home: Path) -> None:
    raw = _record(home, "raw_s", 0, {"missing_field:messages": 120}, format="openai", reader="jsonl", layouts={})
    corpus = corpus_row("sft_data", _record(home, "sft_data", 3, {"too_long": 1}))
    text = format_table([source_row("s", raw, None), corpus])
    header, source, corpus_line = text.splitlines()
    assert header.split() == ["layout", "reader", "in", "kept", "quarantined", "decontaminated", "deduplicated",
                              "filtered", "top", "reasons"]
    assert source.split() == ["source", "s", "openai", "jsonl", "120", "0", "120", "-", "-", "-",
                              "missing_field:messages", "×120"]
    assert corpus_line.split() == ["corpus", "sft_data", "-", "-", "4", "3", "-", "0", "0", "1", "too_long", "×1"]
    end = header.index("quarantined") + len("quarantined")  # numbers are right-aligned under their header
    assert source[end - 3:end] == "120" and corpus_line[end - 1:end] == "-"


def test_status_and_lineage_rows_come_from_the_record(home: Path) -> None:
    raw = _record(home, "raw_s", 2, {"invalid_json": 1}, format="canonical", reader="jsonl", layouts={"canonical": 2})
    assert record_rows(raw["path"]) == accounting(raw)
    assert record_rows(None) is None and record_rows(home / "nowhere") is None
    tree = add_rows({"asset": "clean_s", "path": str(home / "nowhere"),
                     "inputs": [{"asset": "raw_s", "path": raw["path"], "inputs": []}]})
    assert "rows" not in tree and tree["inputs"][0]["rows"]["quarantined"] == 1
