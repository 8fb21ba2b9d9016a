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

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spec.lineage import LINEAGE_FILE, input_ref, make_record, read_record, write_record
from spec.lineage_verify import set_aside, verify_record

_FORMAT = b"cascade-content-v1"
DIGEST_BYTES = 16


def _update_array(h: "hashlib._Hash", arr: pa.Array) -> None:
    t = arr.type
    h.update(str(t).encode() + b"\0" + len(arr).to_bytes(8, "little"))
    h.update(np.packbits(np.asarray(arr.is_valid(), dtype=bool)).tobytes())
    if pa.types.is_dictionary(t):
        _update_array(h, arr.cast(t.value_type))
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        arr = arr.cast(pa.large_binary()).fill_null(b"")  # null slots hash as empty values
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
        h.update((offsets - offsets[0]).tobytes())
        if arr.buffers()[2] is not None:
            h.update(memoryview(arr.buffers()[2])[offsets[0] : offsets[-1]])
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        arr = arr.cast(pa.large_list(t.value_type))
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        h.update((offsets - offsets[0]).tobytes())
        _update_array(h, arr.values.slice(offsets[0], offsets[-1] - offsets[0]))
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            h.update(t.field(i).name.encode() + b"\0")
            _update_array(h, arr.field(i))
    elif pa.types.is_boolean(t):
        h.update(np.packbits(np.asarray(arr.fill_null(False), dtype=bool)).tobytes())
    elif pa.types.is_null(t):
        pass
    elif t.bit_width and t.bit_width % 8 == 0 and not pa.types.is_nested(t):
        # Fixed-width values: nulls zeroed so undefined slot contents never leak in.
        zero = pa.scalar(0).cast(t) if not pa.types.is_decimal(t) else None
        filled = arr.fill_null(zero) if zero is not None and arr.null_count else arr
        width = t.bit_width // 8
        buf = filled.buffers()[1]
        h.update(memoryview(buf)[filled.offset * width : (filled.offset + len(filled)) * width])
    else:  # rare types: their JSON rendering is canonical enough
        h.update(json.dumps(arr.to_pylist(), default=str, sort_keys=True).encode())


def content_hash(table: pa.Table) -> str:
    """Hex digest of the table's content (rows in order), independent of column order."""
    h = hashlib.blake2b(_FORMAT, digest_size=DIGEST_BYTES)
    h.update(table.num_rows.to_bytes(8, "little"))
    for name in sorted(table.column_names):
        h.update(b"\x1e" + name.encode() + b"\0")
        column = table.column(name)
        _update_array(h, column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
    return h.hexdigest()


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
) -> Versioned:
    """Write `table` under `<root>/<asset>/<content hash>/` unless that version exists.

    `inputs` are Versioned objects or {asset, data_version[, path]} dicts; `extra_files`
    maps plain file names to a pa.Table (parquet), bytes, str, a Path to copy, or JSON data.
    Raises ValueError unless rows_in == rows_out + sum(dropped).
    """
    dropped = {str(k): int(v) for k, v in dropped.items()}
    if any(v < 0 for v in dropped.values()):
        raise ValueError(f"negative drop count in {dropped}")
    if rows_in != table.num_rows + sum(dropped.values()):
        raise ValueError(
            f"{asset}: row accounting broken: rows_in={rows_in} != rows_out={table.num_rows} "
            f"+ dropped={sum(dropped.values())} {dropped}"
        )
    if any(part in ("", ".", "..") for part in asset.split("/")):
        raise ValueError(f"bad asset name {asset!r}")
    data_version = content_hash(table)
    folder = Path(root) / asset / data_version
    if (folder / LINEAGE_FILE).exists():
        if not verify_record(folder):
            return Versioned(folder / "data.parquet", data_version, read_dataset_record(folder))
        set_aside(folder)  # edited or damaged (spec.lineage_verify): kept aside, written again

    record = make_record(asset, data_version, folder / "data.parquet", code_version,
                         [_input_record(i) for i in inputs], kind="dataset", rows_in=int(rows_in),
                         rows_out=table.num_rows, dropped=dropped, config=dict(config))
    # Write everything in a private folder, then rename: readers never see half a version.
    tmp = folder.parent / f".tmp-{data_version}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        pq.write_table(table, tmp / "data.parquet")
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


def read_dataset_record(path: Path | str) -> dict[str, Any]:
    """The lineage record of a version, given its folder, its data.parquet or its lineage.json."""
    record = read_record(path)
    if record is None:
        raise FileNotFoundError(f"no {LINEAGE_FILE} for the dataset at {path}")
    return record
