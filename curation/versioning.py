"""Content-addressed dataset versions: `<root>/<asset>/<data_version>/data.parquet`.

Beside the data, `lineage.json` (written by `spec.lineage.write_record`, the one writer of
lineage records) holds the version, inputs, code version, config and row accounting.

A dataset's version is a digest of its content, not of the run that produced it, so
Dagster staleness follows data: rematerializing to identical rows reuses the existing
folder, and a changed row makes a new folder beside the old one (nothing is overwritten).

`content_hash` is blake2b over canonical bytes of each column (name, type, validity bits,
offsets rebased to zero, values), columns sorted by name: independent of chunking, slicing
and column order, and never polars' hash, which is not stable across versions.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from curation.accounting import RowAccount
from curation.content_hash import DIGEST_BYTES, content_hash, content_hash_file
from spec.lineage import LINEAGE_FILE, input_ref, make_record, read_record, write_record
from spec.lineage_verify import set_aside, verify_record

@dataclass
class Versioned:
    """A written (or reused) dataset version."""

    path: Path
    """The `data.parquet` file."""
    data_version: str
    """Content hash; the folder name and Dagster's DataVersion."""
    record: dict[str, Any]
    """The lineage record written beside the data (the existing one when reused)."""

    @property
    def folder(self) -> Path:
        return self.path.parent


def _input_record(item: Any) -> dict[str, Any]:
    if isinstance(item, Versioned):
        return input_ref(item.record["asset"], item.data_version, item.path)
    record = dict(item)
    if "asset" not in record or "data_version" not in record:
        raise ValueError(f"an input needs `asset` and `data_version`: {record}")
    return input_ref(record["asset"], record["data_version"], record.get("path"))


def _write_extra(folder: Path, name: str, value: Any) -> None:
    target = folder / name
    if Path(name).name != name:
        raise ValueError(f"extra file names must be plain file names: {name!r}")
    if isinstance(value, pa.Table):
        pq.write_table(value, target)
    elif isinstance(value, bytes):
        target.write_bytes(value)
    elif isinstance(value, str):
        target.write_text(value)
    elif isinstance(value, Path):
        shutil.copyfile(value, target)
    else:
        target.write_text(json.dumps(value, indent=2, sort_keys=True, default=str))


def _check_accounting(asset: str, rows_in: int, rows_out: int, dropped: Mapping[str, int]) -> dict[str, int]:
    if any(part in ("", ".", "..") for part in asset.split("/")):
        raise ValueError(f"bad asset name {asset!r}")
    account = RowAccount(int(rows_in))
    account.drop_all(dropped)
    return account.check(rows_out, asset)


def _existing(folder: Path, data_version: str) -> Versioned | None:
    """The version already on disk when its record verifies; a damaged one is set aside."""
    if (folder / LINEAGE_FILE).exists():
        if not verify_record(folder):
            return Versioned(folder / "data.parquet", data_version, read_dataset_record(folder))
        set_aside(folder)  # edited or damaged (spec.lineage_verify): kept aside, written again
    return None


def _publish(tmp: Path, folder: Path, data_version: str, record: dict[str, Any],
             extra_files: Mapping[str, Any] | None) -> Versioned:
    """Finish the private folder `tmp` (extra files, record) and rename it into place."""
    try:
        for name, value in (extra_files or {}).items():
            _write_extra(tmp, name, value)
        write_record(tmp, record)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / LINEAGE_FILE).exists():
                raise
            shutil.rmtree(tmp)  # a concurrent writer produced the same version first
            return Versioned(folder / "data.parquet", data_version, read_dataset_record(folder))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Versioned(folder / "data.parquet", data_version, record)


def write_versioned(
    table: pa.Table,
    root: Path,
    asset: str,
    *,
    rows_in: int,
    dropped: Mapping[str, int],
    inputs: Sequence[Any],
    code_version: str,
    config: Mapping[str, Any],
    extra_files: Mapping[str, Any] | None = None,
    row_group_rows: int | None = None,
    details: Mapping[str, Any] | None = None,
) -> Versioned:
    """Write `table` under `<root>/<asset>/<content hash>/` unless that version exists.

    `inputs` are Versioned objects or {asset, data_version[, path]} dicts; `extra_files`
    maps plain file names to a pa.Table (parquet), bytes, str, a Path to copy, or JSON data;
    `row_group_rows` sets small parquet row groups for data that is read back streamed; `details`
    are more record keys (a raw source's row layout and reader).
    Raises ValueError unless rows_in == rows_out + sum(dropped).
    """
    dropped = _check_accounting(asset, rows_in, table.num_rows, dropped)
    data_version = content_hash(table)
    folder = Path(root) / asset / data_version
    existing = _existing(folder, data_version)
    if existing is not None:
        return existing
    record = make_record(asset, data_version, folder / "data.parquet", code_version,
                         [_input_record(i) for i in inputs], kind="dataset", rows_in=int(rows_in),
                         rows_out=table.num_rows, dropped=dropped, config=dict(config), **dict(details or {}))
    # Write everything in a private folder, then rename: readers never see half a version.
    tmp = folder.parent / f".tmp-{data_version}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        pq.write_table(table, tmp / "data.parquet", row_group_size=row_group_rows)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _publish(tmp, folder, data_version, record, extra_files)


STREAM_GROUP_ROWS, STREAM_GROUP_BYTES = 8192, 32 << 20
"""Row-group bounds of a streamed write: readers get sensible row groups, the writer holds one."""


def write_versioned_batches(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    root: Path,
    asset: str,
    *,
    rows_in: int,
    dropped: Mapping[str, int],
    inputs: Sequence[Any],
    code_version: str,
    config: Mapping[str, Any],
    extra_files: Mapping[str, Any] | None = None,
) -> Versioned:
    """`write_versioned` for rows that arrive as record batches: they are streamed to disk and the
    version is `content_hash_file` of what was written (equal to `content_hash` of the whole
    table), so memory stays at one batch however large the dataset."""
    tmp = Path(root) / asset / f".tmp-stream-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        rows_out = 0
        pending: list[pa.RecordBatch] = []
        with pq.ParquetWriter(tmp / "data.parquet", schema) as writer:
            for batch in itertools.chain(batches, [None]):  # gathered into row groups of bounded size
                if batch is not None:
                    pending.append(batch)
                    rows_out += batch.num_rows
                if pending and (batch is None or sum(b.num_rows for b in pending) >= STREAM_GROUP_ROWS
                                or sum(b.nbytes for b in pending) >= STREAM_GROUP_BYTES):
                    writer.write_table(pa.Table.from_batches(pending, schema=schema))
                    pending = []
        dropped = _check_accounting(asset, rows_in, rows_out, dropped)
        data_version = content_hash_file(tmp / "data.parquet")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    folder = Path(root) / asset / data_version
    existing = _existing(folder, data_version)
    if existing is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        return existing
    record = make_record(asset, data_version, folder / "data.parquet", code_version,
                         [_input_record(i) for i in inputs], kind="dataset", rows_in=int(rows_in),
                         rows_out=rows_out, dropped=dropped, config=dict(config))
    return _publish(tmp, folder, data_version, record, extra_files)


def read_dataset_record(path: Path | str) -> dict[str, Any]:
    """The lineage record of a version, given its folder, its data.parquet or its lineage.json."""
    record = read_record(path)
    if record is None:
        raise FileNotFoundError(f"no {LINEAGE_FILE} for the dataset at {path}")
    return record
