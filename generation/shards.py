"""Sharded generation: a generation's input rows prompted in N shards, then reassembled into
exactly the record stream the unsharded run gives, so the same filter makes the same table.

Why it is exact:
* Row r goes to shard `crc32(utf-8 of its row_id) mod N` (`shard_of`; a row without a
  row_id uses its input position, as `GenRecord.row_id` does): stable across runs and
  machines, known before anything is generated, and independent of the other rows, so each
  shard step selects its share of the input by itself (`shard_rows`).
* A shard step runs `generation.pipeline.generate_rows` on its rows (the generation cache,
  the batching and the seeds of the unsharded path) and keeps each record with the row's
  position in the whole input (`records_table`): the shard dataset. Cache keys do not depend
  on sharding, so a cached sample is found whatever the shard count.
* `merged_records` walks the input rows in order and takes each row's records from its
  shard's table (within a shard, records are in input order), rebuilding the `GenRecord`s
  the unsharded `generate_rows` would have yielded: same rows, modes, samples, order. The
  filters (generation.filters) are pure functions of that stream, so the merged output, its
  drop counts and its content hash equal the unsharded ones whenever the samples are equal.

When the samples are equal: always when they come from the cache; for fresh samples when the
engine's sample is a function of (request, sample index, seed) alone — the `openai` engine
sends the seed with each request (a server honouring per-request seeds, like vLLM's, then
answers alike); the `hf` and `vllm` engines seed each engine call as a whole, so a fresh sample
depends on which prompts shared its call (a shard's batches hold other prompts than the
unsharded run's): the same distribution, other draws.

Memory: a shard step holds its own records (1/N of the samples) until it writes them; the
merge streams every shard table batch by batch and holds one batch per shard.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from generation.pipeline import GenerationStats, GenRecord, iter_rows

SHARDING = "crc32(row_id) mod shards"
"""The assignment rule, as shown in the UI and the docs."""

RECORD_SCHEMA = pa.schema([
    pa.field("index", pa.int64(), nullable=False),
    pa.field("row_id", pa.string(), nullable=False),
    pa.field("mode", pa.string(), nullable=False),
    pa.field("sample", pa.int32(), nullable=False),
    pa.field("response", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("tokens", pa.int64(), nullable=False),
    pa.field("problem", pa.string()),
])
"""A shard dataset: one row per (input row, mode, sample), `index` = position in the whole input.
Whether a sample came from the cache is left out, so a rerun writes the same version."""


def shard_of(row_key: str, shards: int) -> int:
    """The shard of a row whose key (row_id, else input position) is `row_key`."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    return zlib.crc32(row_key.encode("utf-8")) % shards


def row_keys(rows: pa.Table) -> list[str]:
    """Each row's key: its `row_id` as text, else its input position (as `GenRecord.row_id`)."""
    ids = rows.column("row_id").to_pylist() if "row_id" in rows.column_names else [None] * rows.num_rows
    return [str(rid) if rid is not None else str(i) for i, rid in enumerate(ids)]


def assignment(rows: pa.Table, shards: int) -> np.ndarray:
    """The shard of every input row (int array, input order)."""
    return np.fromiter((shard_of(k, shards) for k in row_keys(rows)), dtype=np.int64, count=rows.num_rows)


def shard_rows(rows: pa.Table, shard: int, shards: int) -> tuple[pa.Table, np.ndarray]:
    """Shard `shard`'s rows (in input order) and their positions in the whole input."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not in 0..{shards - 1}")
    positions = np.flatnonzero(assignment(rows, shards) == shard)
    return rows.take(pa.array(positions, pa.int64())), positions


def records_table(records: Iterable[GenRecord], positions: Sequence[int] | np.ndarray) -> pa.Table:
    """A shard's records as a RECORD_SCHEMA table; a record's row index is mapped through
    `positions` (shard-local position -> position in the whole input)."""
    cols: dict[str, list[Any]] = {name: [] for name in RECORD_SCHEMA.names}
    for rec in records:
        index = int(positions[rec.index])
        rid = rec.row.get("row_id")
        values = (index, str(rid) if rid is not None else str(index), rec.mode, rec.sample, rec.response,
                  rec.finish_reason, rec.tokens, rec.problem)
        for name, value in zip(RECORD_SCHEMA.names, values):
            cols[name].append(value)
    return pa.table(cols, schema=RECORD_SCHEMA)


Part = pa.Table | Iterable[pa.RecordBatch]
"""A shard's records: a table, or its record batches (e.g. `pq.ParquetFile(...).iter_batches()`)."""


def _shard_stream(part: Part, batch_rows: int) -> Iterator[dict[str, Any]]:
    batches = part.to_batches(max_chunksize=batch_rows) if isinstance(part, pa.Table) else part
    for batch in batches:
        yield from batch.to_pylist()


def merged_records(rows: pa.Table | Iterable[dict[str, Any]], parts: Sequence[Part],
                   batch_rows: int = 4096) -> Iterator[GenRecord]:
    """The records of the unsharded run, in its order: input rows in order, each row's records
    taken from the shard its key maps to (shard k = parts[k], read batch by batch).

    Raises ValueError when a shard's records do not match its rows (a shard table written for
    other input rows or another shard count)."""
    shards = len(parts)
    if shards < 1:
        raise ValueError("merged_records needs at least one shard table")
    streams = [_shard_stream(t, batch_rows) for t in parts]
    heads: list[dict[str, Any] | None] = [next(s, None) for s in streams]
    for index, row in enumerate(iter_rows(rows)):
        rid = row.get("row_id")
        k = shard_of(str(rid) if rid is not None else str(index), shards)
        head = heads[k]
        if head is None or head["index"] != index:
            raise ValueError(f"shard {k} has no records for input row {index} (row_id {rid!r}; its next record is "
                             f"for row {None if head is None else head['index']}): the shard outputs do not match the input")
        while head is not None and head["index"] == index:
            yield GenRecord(index, row, head["mode"], head["sample"], head["response"], head["finish_reason"],
                            head["tokens"], problem=head["problem"])
            head = heads[k] = next(streams[k], None)
    left = [k for k, head in enumerate(heads) if head is not None]
    if left:
        raise ValueError(f"shard {left[0]} has records past the last input row (row {heads[left[0]]['index']})")


def merged_stats(parts: Iterable[Mapping[str, Any]]) -> GenerationStats:
    """The counts of the whole run: the sum of the shards' `dataclasses.asdict(GenerationStats)`
    (elapsed time: the slowest shard's, since shards run side by side)."""
    total = GenerationStats(rows_total=0, final=True)
    for part in parts:
        for f in dataclasses.fields(GenerationStats):
            value = part.get(f.name)
            if f.name in ("final",) or value is None:
                continue
            if f.name == "elapsed_s":
                total.elapsed_s = max(total.elapsed_s, float(value))
            else:
                setattr(total, f.name, getattr(total, f.name) + value)
    return total


__all__ = ["RECORD_SCHEMA", "SHARDING", "assignment", "merged_records", "merged_stats", "records_table",
           "row_keys", "shard_of", "shard_rows"]
