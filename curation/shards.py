"""Sharded curation: the per-shard, per-partition and streaming parts of cleaning one source.

One code path: the unsharded clean asset and the sharded one call the same functions; sharding
is a parameter. A source's clean table is made in four kinds of steps (assets/shards.py runs
them as Dagster steps; `curation.dedup.dedup` runs the dedup stages in one process):

1. **Shard** k of N (`curate_shard`): `curation.sources.load_source` reads only the records of
   shard k (`shard_of`: CRC32 of the raw line mod N, known before a record is parsed), maps
   them onto the canonical schema with quarantine, and each valid row keeps its position in
   the source (`ORDINAL`). Decontamination is per row. The dedup keys of the rows
   (`curation.dedup_stages.row_keys`) are split into P key partitions.
2. **Partition** j of P (`confirm_partition`): the keys of partition j from every shard give
   candidate pairs, confirmed on the texts of the candidate rows only, read back from the shard
   outputs (`ShardTexts`).
3. **Cluster** (`curation.dedup_stages.cluster`): one step over the confirmed edges; memory
   proportional to the duplicate pairs.
4. **Assemble** (`assemble`): the shard outputs merged by position, removed rows left out,
   streamed in record batches to the writer, so the result (rows in source order) equals
   the unsharded path's and no step holds the whole corpus.

Every step's memory is bounded by its shard or partition (rows / N), not by the corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from curation.accounting import RowAccount
from curation.content_hash import STREAM_BUFFER
from curation.dedup_params import DedupParams, dedup_fields, text_column
from curation.dedup_stages import candidate_pairs, confirm_pairs, row_keys, split_keys
from curation.sources import LoadResult, load_source

__all__ = ["ORDINAL", "ShardTexts", "assemble", "confirm_partition", "curate_shard", "decontam_report", "write_clean"]

ORDINAL = "_ordinal"
"""Position of a valid row in the whole source (0-based, blank lines not counted)."""
ROW_GROUP_ROWS = 2048
"""Row-group size of shard outputs: what one streamed read decodes per shard (the assembly holds one
row group of every shard, so this bounds its memory as shards grow)."""


@dataclass
class CuratedShard:
    """One shard of a source after quarantine and decontamination, with its dedup keys."""

    load: LoadResult
    """The shard's read: valid rows (with ORDINAL) and quarantine."""
    table: pa.Table
    """Valid rows that passed decontamination, in source order, with ORDINAL."""
    hits: list[Any]
    """Decontamination records (`curation.decontam.Contamination`; `row` indexes `load.table`)."""
    keys: list[pa.Table]
    """Dedup keys of `table`'s rows, one table per key partition."""

    @property
    def dropped(self) -> dict[str, int]:
        """Quarantine and contamination counts of the shard (checked against its rows)."""
        account = RowAccount(self.load.rows_in, dict(self.load.dropped))
        account.drop_all([h.benchmark for h in self.hits], prefix="contaminated:")
        return account.check(self.table.num_rows, "shard")


def curate_shard(path: Path | str, source: Mapping[str, Any], domain: str, shard: int, shards: int,
                 index: Any, decontam_fields: Any, params: DedupParams, partitions: int) -> CuratedShard:
    """Steps 1 of the module docstring for shard `shard` of `shards`.

    `source` holds the recipe's source fields (name, format, columns, split, limit, reader);
    `index` is the `curation.decontam_index.BenchmarkIndex`; `decontam_fields(schema)` picks the fields
    it scans (the recipe's `curation.decontam.fields_for`)."""
    from curation.decontam import decontaminate_table

    load = load_source(path, source.get("format", "auto"), domain, source["name"], columns=source.get("columns") or None,
                       split=source.get("split"), limit=source.get("limit"), reader=source.get("reader", "auto"),
                       shard=shard, shards=shards, ordinal_column=ORDINAL)
    rows = load.table.drop_columns([ORDINAL])
    _, hits = decontaminate_table(rows, index, decontam_fields(rows.schema))
    keep = np.ones(load.table.num_rows, dtype=bool)
    keep[[h.row for h in hits]] = False
    table = load.table.filter(pa.array(keep))
    texts = text_column(table.drop_columns([ORDINAL]), params.fields_for(domain))
    keys = row_keys(texts, np.asarray(table.column(ORDINAL), dtype=np.int64), shard, params)
    return CuratedShard(load, table, hits, split_keys(keys, partitions))


def write_shard_rows(table: pa.Table, path: Path) -> None:
    """A shard's rows, in small row groups so that readers stream them (`assemble`, `ShardTexts`)."""
    pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS)


class ShardTexts:
    """A `curation.dedup_stages.TextFetcher` over shard outputs on disk: reads only the dedup
    fields of the requested rows (a filtered scan, one row group at a time)."""

    def __init__(self, shard_files: Mapping[int, Path | str], fields: Sequence[str] | None):
        self.files = {int(k): Path(v) for k, v in shard_files.items()}
        self.fields = list(fields) if fields else None

    def __call__(self, shard: int, positions: np.ndarray) -> pa.Table:
        dataset = ds.dataset(self.files[shard], format="parquet")
        fields = self.fields or dedup_fields(dataset.schema)
        table = dataset.to_table(columns=[ORDINAL, "row_id", "source", *fields],
                                 filter=pc.field(ORDINAL).isin(pa.array(positions, pa.int64())),
                                 fragment_scan_options=ds.ParquetFragmentScanOptions(
                                     pre_buffer=False, buffer_size=STREAM_BUFFER), use_threads=False)
        table = table.sort_by(ORDINAL)
        return pa.table({"pos": table.column(ORDINAL), "row_id": table.column("row_id"),
                         "source": table.column("source"), "text": text_column(table, fields)})


def confirm_partition(keys: Sequence[pa.Table], texts: ShardTexts, params: DedupParams) -> pa.Table:
    """Steps 2: the confirmed duplicate edges (`EDGES_SCHEMA`) of one key partition, given its keys
    from every shard."""
    return confirm_pairs(candidate_pairs(pa.concat_tables(keys)), texts, params)


def assemble(shard_files: Sequence[Path | str], removed: pa.Table, batch_rows: int = ROW_GROUP_ROWS
             ) -> Iterator[pa.RecordBatch]:
    """Step 4: the rows of every shard output merged by ORDINAL, those in `removed` (REMOVED_SCHEMA)
    left out and ORDINAL dropped, as record batches in source order. Holds about one row group
    (ROW_GROUP_ROWS) of every shard plus the rows not yet emitted."""
    removed_pos = np.sort(np.asarray(removed.column("pos"), dtype=np.int64))
    readers = [pq.ParquetFile(f, pre_buffer=False, buffer_size=STREAM_BUFFER).iter_batches(
        batch_size=max(256, batch_rows // max(1, len(shard_files))), use_threads=False) for f in shard_files]
    pending: list[pa.Table | None] = [None] * len(readers)
    live = list(range(len(readers)))
    while live:
        for i in live:  # every live shard holds at least one unread row in `pending`
            while pending[i] is None or not pending[i].num_rows:
                batch = next(readers[i], None)
                if batch is None:
                    pending[i] = None
                    break
                pending[i] = pa.Table.from_batches([batch])
        live = [i for i in live if pending[i] is not None]
        if not live:
            break
        # Rows up to the smallest "last position" of the live shards can be emitted in order.
        bound = min(pending[i].column(ORDINAL)[-1].as_py() for i in live)
        ready, rest = [], {}
        for i in live:
            ordinal = pending[i].column(ORDINAL)
            cut = int(np.searchsorted(np.asarray(ordinal, dtype=np.int64), bound, side="right"))
            ready.append(pending[i].slice(0, cut))
            rest[i] = pending[i].slice(cut)
        for i, table in rest.items():
            pending[i] = table
        merged = pa.concat_tables(ready).sort_by(ORDINAL)
        positions = np.asarray(merged.column(ORDINAL), dtype=np.int64)
        merged = merged.filter(pa.array(~np.isin(positions, removed_pos))).drop_columns([ORDINAL])
        for batch in merged.to_batches(max_chunksize=batch_rows):
            if batch.num_rows:
                yield batch
        for i in live:  # a drained shard is refilled at the top of the loop
            if not pending[i].num_rows:
                pending[i] = None
                nxt = next(readers[i], None)
                pending[i] = pa.Table.from_batches([nxt]) if nxt is not None else None
        live = [i for i in live if pending[i] is not None]


def decontam_report(shard_folders: Sequence[Path]) -> list[dict[str, Any]]:
    """The unsharded path's `decontam_dropped.json` from the shard outputs: each hit's `row` is its
    index among the source's valid rows (its position minus the quarantined records before it), so
    the memory is the hits and the quarantined records, not the rows."""
    import json

    hits = sorted((h for f in shard_folders for h in json.loads((f / "decontam_dropped.json").read_text())),
                  key=lambda h: h["ordinal"])
    lines = np.sort(np.concatenate([np.asarray(pq.read_table(f / "quarantine.parquet", columns=[ORDINAL]).column(ORDINAL),
                                               dtype=np.int64) for f in shard_folders] or [np.zeros(0, np.int64)]))
    ordinals = np.array([h["ordinal"] for h in hits], dtype=np.int64)
    rows = ordinals - np.searchsorted(lines, ordinals)
    report = [{"row": int(r), "benchmark": h["benchmark"], "ngram": h["ngram"], "field": h["field"]}
              for r, h in zip(rows, hits)]
    return report


def write_clean(shard_folders: Sequence[Path], removed: pa.Table, schema: pa.Schema, root: Path, asset: str, *,
                valid_rows: int, inputs: Sequence[Any], code_version: str, config: Mapping[str, Any]) -> Any:
    """Step 4 with its record: the assembled rows streamed to `<root>/<asset>/<version>/` with the
    unsharded path's `decontam_dropped.json` and `dedup_dropped.parquet`, the accounting checked
    (`valid_rows` in = kept + contaminated + removed). Returns the `Versioned` output."""
    from curation.dedup import DROPPED_SCHEMA
    from curation.versioning import write_versioned_batches

    report = decontam_report(shard_folders)
    account = RowAccount(valid_rows)
    account.drop_all([h["benchmark"] for h in report], prefix="contaminated:")
    account.drop_all(removed.column("reason").to_pylist())
    dropped = removed.select(["source", "row_id", "reason", "duplicate_of"]).add_column(
        0, "input", pa.array([0] * removed.num_rows, pa.int32())).cast(DROPPED_SCHEMA)
    return write_versioned_batches(
        assemble([Path(f) / "data.parquet" for f in shard_folders], removed), schema, root, asset,
        rows_in=account.rows_in, dropped=account.dropped, inputs=inputs, code_version=code_version, config=config,
        extra_files={"decontam_dropped.json": report, "dedup_dropped.parquet": dropped})
