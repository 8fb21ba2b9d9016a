"""Exact and near-duplicate removal within and across tables, in one process.

`dedup` runs the stages of `curation.dedup_stages` (keys, buckets, confirmation, clusters) on
in-memory tables with one partition; the sharded clean asset runs the very same stages as
Dagster steps over shards and key partitions, so both remove the same rows.

Rows are numbered in order: `reference` tables first (their rows are never dropped, they
only remove matching rows from the others, e.g. RL prompt sets against SFT corpora), then
`tables` in order. Rows whose normalised dedup text (`curation.dedup_params.text_column`: the
whole example by default) is equal, or whose word-shingle Jaccard similarity is at least the
threshold, are linked; every linked group keeps its earliest row and drops the others as
`exact_duplicate` (same normalised text as the kept row) or `near_duplicate`, each naming the
row_id it repeats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curation.dedup_params import DedupParams, text_column
from curation.dedup_stages import candidate_pairs, cluster, confirm_pairs, row_keys

__all__ = ["DROPPED_SCHEMA", "DedupResult", "dedup"]

DROPPED_SCHEMA = pa.schema(
    [
        pa.field("input", pa.int32(), nullable=False),  # index into `tables`
        pa.field("source", pa.string()),
        pa.field("row_id", pa.string()),
        pa.field("reason", pa.string(), nullable=False),  # exact_duplicate | near_duplicate
        pa.field("duplicate_of", pa.string()),  # row_id of the earlier row it repeats
    ]
)


@dataclass
class DedupResult:
    """Kept rows per input table and one record per dropped row."""

    tables: list[pa.Table]
    """Kept rows of each input table, in order."""
    dropped: pa.Table
    """DROPPED_SCHEMA rows."""

    def dropped_counts(self, i: int | None = None) -> dict[str, int]:
        """{reason: count} for input table `i` (every input when None)."""
        table = self.dropped if i is None else self.dropped.filter(pc.equal(self.dropped.column("input"), i))
        rows = table.column("reason").to_pylist()
        return {r: rows.count(r) for r in sorted(set(rows))}


def _column(table: pa.Table, name: str) -> pa.Array:
    if name not in table.column_names:
        return pa.nulls(table.num_rows, pa.string())
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def dedup(
    tables: Sequence[pa.Table],
    params: DedupParams | None = None,
    fields: Sequence[str] | None = None,
    reference: Sequence[pa.Table] = (),
) -> DedupResult:
    """Remove exact and near duplicates within and across `tables` (earlier rows win).

    `fields` default: the whole example (`curation.dedup_params.dedup_fields`)."""
    params = params or DedupParams()
    everything = list(reference) + list(tables)
    starts = np.cumsum([0] + [t.num_rows for t in everything])
    texts = pa.concat_arrays([text_column(t, fields) for t in everything]) if everything else pa.array([], pa.string())
    ids = pa.concat_arrays([_column(t, "row_id").cast(pa.string()) for t in everything]) if everything else texts
    sources = pa.concat_arrays([_column(t, "source").cast(pa.string()) for t in everything]) if everything else texts

    def fetch(_shard: int, positions: np.ndarray) -> pa.Table:
        take = pa.array(positions)
        return pa.table({"pos": positions, "row_id": ids.take(take), "source": sources.take(take),
                         "text": texts.take(take)})

    keys = row_keys(texts, np.arange(len(texts), dtype=np.int64), 0, params)
    removed = cluster([confirm_pairs(candidate_pairs(keys), fetch, params)], protected_below=int(starts[len(reference)]))
    positions = np.asarray(removed.column("pos"), dtype=np.int64)
    table_of = np.searchsorted(starts, positions, side="right") - 1
    dropped = pa.table({"input": pa.array(table_of - len(reference), pa.int32()), "source": removed.column("source"),
                        "row_id": removed.column("row_id"), "reason": removed.column("reason"),
                        "duplicate_of": removed.column("duplicate_of")}, schema=DROPPED_SCHEMA)
    kept = []
    for t_index in range(len(reference), len(everything)):
        mask = np.ones(everything[t_index].num_rows, dtype=bool)
        mask[positions[table_of == t_index] - starts[t_index]] = False
        kept.append(everything[t_index].filter(pa.array(mask)))
    return DedupResult(kept, dropped)
