"""A source's version comes from the bytes its rows were parsed from (spec.consistent_read): a
file replaced (atomic `mv`) or rewritten in place while it is read fails the asset with a clear
message and writes nothing, for every reader (jsonl, parquet, hub_parquet folders) and for
benchmark files. The change is made deterministically inside the read: a wrapped reader
changes the file after its first record, between the first and the last access."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spec.consistent_read as consistent_read
from curation.sources import READERS, load_source
from spec.consistent_read import FileChangedError, read_consistent
from spec.data import BenchmarkSpec, SourceSpec
from spec.hashing import file_digest
from spec.paths import REPO_ROOT

ROWS = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(40)]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _replace_with(other_rows: list[dict]) -> Callable[[Path], None]:
    """An atomic `mv` of another file onto the path (a new inode; an open reader keeps the old one)."""
    def change(path: Path) -> None:
        other = path.with_name("incoming" + "".join(path.suffixes))
        if path.suffix == ".parquet":
            pq.write_table(pa.Table.from_pylist(other_rows), other)
        else:
            _jsonl(other, other_rows)
        os.replace(other, path)
    return change


def _rewrite_in_place(path: Path) -> None:
    """A `cp` over the path: same inode, truncated, then written with fewer rows."""
    with open(path, "r+b") as fh:
        fh.truncate(0)
        fh.write(b"".join(json.dumps(r).encode() + b"\n" for r in ROWS[:3]))


def _changing(monkeypatch: pytest.MonkeyPatch, reader: str, change: Callable[[Path], None]) -> None:
    """Wrap READERS[reader] so that `change(path)` runs right after the first record is read."""
    original = READERS[reader]

    def wrapped(path: Any, split: str | None, limit: int | None) -> Iterator[Any]:
        records = iter(original(path, split, limit))
        yield next(records)
        change(Path(path))
        yield from records

    monkeypatch.setitem(READERS, reader, wrapped)


def _materialize(asset: dg.AssetsDefinition) -> dg.ExecuteInProcessResult:
    from assets.store import STORE, CascadeStore

    return dg.materialize([asset], instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                          resources={STORE: CascadeStore()})


def _failure(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    return next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error.message


def _raw(path: Path, reader: str = "auto") -> dg.AssetsDefinition:
    from assets.common import WorkTimer
    from assets.sources import _raw_asset
    from dagster_project.recipe import load_recipe

    recipe = load_recipe(REPO_ROOT / "recipes" / "tiny.yaml")
    return _raw_asset(recipe, SourceSpec(name="src", domain="math", path=str(path), reader=reader), WorkTimer())


@pytest.mark.parametrize("how", ["replaced", "rewritten"])
def test_a_jsonl_source_changed_while_read_fails_the_asset(home: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    path = _jsonl(tmp_path / "math.jsonl", ROWS)
    _changing(monkeypatch, "jsonl", _replace_with(ROWS[:5]) if how == "replaced" else _rewrite_in_place)
    message = _failure(_materialize(_raw(path)))
    assert f"source 'src' ({path}) changed while it was read (" in message and "rerun when it is stable" in message
    assert ("replaced by another file" if how == "replaced" else "rewritten") in message
    assert not (home / "data" / "raw_src").exists()  # nothing recorded for rows of other bytes


def test_a_parquet_source_replaced_while_read_fails_the_asset(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "math.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    _changing(monkeypatch, "parquet", _replace_with(ROWS[:5]))
    message = _failure(_materialize(_raw(path)))
    assert "changed while it was read" in message and "replaced by another file" in message


def test_a_hub_parquet_folder_changed_while_read_fails_the_asset(home: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "hub" / "data"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS[:20]), folder / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[20:]), folder / "train-00001-of-00002.parquet")

    def add_a_shard(_: Path) -> None:
        pq.write_table(pa.Table.from_pylist(ROWS[:2]), folder / "train-00002-of-00003.parquet")

    _changing(monkeypatch, "hub_parquet", add_a_shard)
    message = _failure(_materialize(_raw(tmp_path / "hub", reader="hub_parquet")))
    assert "changed while it was read" in message and "data/train-00002-of-00003.parquet appeared" in message


def test_an_unchanged_source_records_the_digest_of_what_it_parsed(home: Path, tmp_path: Path) -> None:
    from spec.lineage import read_record

    path = _jsonl(tmp_path / "math.jsonl", ROWS)
    assert _materialize(_raw(path)).success
    [folder] = (home / "data" / "raw_src").iterdir()
    assert read_record(folder)["inputs"][0]["data_version"] == file_digest(path)


def test_a_benchmark_file_replaced_while_read_fails_the_asset(home: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from assets.common import WorkTimer
    from assets.sources import _benchmark_asset
    from dagster_project.recipe import load_recipe

    path = _jsonl(tmp_path / "eval_math.jsonl", ROWS)
    recipe = load_recipe(REPO_ROOT / "recipes" / "tiny.yaml")
    bench = BenchmarkSpec(name="em", path=str(path), domain="math", eval_domain="math")
    _changing(monkeypatch, "jsonl", _replace_with(ROWS[:5]))
    message = _failure(_materialize(_benchmark_asset(recipe, bench, WorkTimer())))
    assert f"benchmark 'em' ({path}) changed while it was read (" in message and "rerun when it is stable" in message


def test_read_consistent_returns_the_digest_of_the_bytes_read(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "math.jsonl", ROWS)
    result, digest = read_consistent(path, lambda: load_source(path, "auto", "math", "s"), "source 's'")
    assert result.table.num_rows == len(ROWS) and digest == file_digest(path)


def test_a_file_rewritten_while_hashed_is_not_given_a_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`file_digest` (the file observer's version) refuses bytes that changed under the hash."""
    path = _jsonl(tmp_path / "math.jsonl", ROWS)
    real_open = open

    def open_then_rewrite(file: Any, *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, *args, **kwargs)
        _rewrite_in_place(Path(file))  # after the first stat, while the hash reads
        return handle

    monkeypatch.setattr(consistent_read, "open", open_then_rewrite, raising=False)
    with pytest.raises(FileChangedError, match=r"math.jsonl changed while it was hashed \(math.jsonl was rewritten"):
        file_digest(path)


def test_shards_that_read_different_versions_of_the_file_fail_the_merge() -> None:
    """Each shard step reads the file on its own: the assemble step refuses shards of different versions."""
    from assets.common import WorkTimer
    from assets.shards import _assemble_op
    from assets.store import STORE, CascadeStore
    from dagster_project.recipe import load_recipe

    recipe = load_recipe(REPO_ROOT / "recipes" / "tiny.yaml")
    merge = _assemble_op(recipe, SourceSpec(name="src", domain="math", path="math.jsonl", shards=2), WorkTimer())

    def part(version: str) -> dict:
        return {"path": "/nonexistent", "data_version": "d", "source_version": version, "rows_in": 1,
                "quarantined": 0, "format": "canonical", "reader": "jsonl"}

    with pytest.raises(dg.Failure, match=r"source 'src' changed between the reads of its shards \(versions a, b\)"):
        merge(dg.build_op_context(resources={STORE: CascadeStore()}), removed={"path": "/nonexistent"},
              shard_0=part("a"), shard_1=part("b"))
