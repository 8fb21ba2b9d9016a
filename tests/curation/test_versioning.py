"""Content-hash versions: stable, never overwritten, row accounting enforced."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.content_hash import content_hash
from curation.versioning import read_dataset_record, write_versioned

_T = pa.table({"row_id": ["a", "b", None], "n": [1, None, 3], "tags": [["x"], [], None]})


def test_content_hash_ignores_layout_but_not_content():
    h = content_hash(_T)
    assert h == content_hash(pa.concat_tables([_T.slice(0, 1), _T.slice(1)]))  # chunking
    assert h == content_hash(_T.select(["tags", "n", "row_id"]))  # column order
    assert h == content_hash(pa.table({"row_id": pa.array(["zz", "a", "b", None]).slice(1), "n": [1, None, 3], "tags": [["x"], [], None]}))
    assert h != content_hash(_T.slice(0, 2))
    assert h != content_hash(_T.set_column(0, "row_id", pa.array(["a", "b", ""])))  # null != ""
    assert h != content_hash(_T.rename_columns(["row_id", "m", "tags"]))
    assert h != content_hash(pa.table({"row_id": ["b", "a", None], "n": [1, None, 3], "tags": [["x"], [], None]}))


def _write(root, table, **kw):
    args = dict(rows_in=table.num_rows + 2, dropped={"invalid_json": 2}, inputs=[{"asset": "up", "data_version": "v0"}],
                code_version="c1", config={"k": 1})
    args.update(kw)
    return write_versioned(table, root, "raw_demo", **args)


def test_write_versioned_layout_and_manifest(tmp_path):
    q = pa.table({"reason": ["invalid_json", "invalid_json"]})
    v = _write(tmp_path, _T, extra_files={"quarantine.parquet": q})
    assert v.path == tmp_path / "raw_demo" / v.data_version / "data.parquet"
    assert pq.read_table(v.path).equals(_T)
    assert pq.read_table(v.folder / "quarantine.parquet").equals(q)
    m = json.loads((v.folder / "lineage.json").read_text())
    assert m == read_dataset_record(v.folder) == read_dataset_record(v.path) == v.record
    assert {k: m[k] for k in ("data_version", "rows_in", "rows_out", "dropped", "code_version", "config", "asset")} == {
        "data_version": v.data_version, "rows_in": 5, "rows_out": 3, "dropped": {"invalid_json": 2},
        "code_version": "c1", "config": {"k": 1}, "asset": "raw_demo",
    }
    assert m["inputs"] == [{"asset": "up", "data_version": "v0", "path": None}] and m["created_at"]


def test_same_content_reuses_and_new_content_adds_a_version(tmp_path):
    first = _write(tmp_path, _T)
    again = _write(tmp_path, _T.select(["n", "tags", "row_id"]), code_version="c2")
    assert again.data_version == first.data_version and again.record["code_version"] == "c1"
    changed = _write(tmp_path, _T.slice(1), rows_in=4)
    assert changed.data_version != first.data_version
    assert sorted(p.name for p in (tmp_path / "raw_demo").iterdir()) == sorted([first.data_version, changed.data_version])
    assert pq.read_table(first.path).num_rows == 3  # the old version is untouched


def test_row_accounting_identity_is_enforced(tmp_path):
    with pytest.raises(ValueError, match="row accounting"):
        _write(tmp_path, _T, rows_in=4)
    assert not (tmp_path / "raw_demo").exists() or not any((tmp_path / "raw_demo").iterdir())
