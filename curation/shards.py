"""Sharded curation: a source read and curated in shards, then merged into exactly the rows
(and so the content hash) that the unsharded path produces.

Why it is exact:
* A record goes to shard `crc32(raw line) % shards` (`shard_of`): cheap, stable, and known
  before the record is parsed, so a shard parses and validates only its own records. Each
  valid row keeps its position in the source (`ORDINAL`), each quarantined one its line.
* Normalisation, quarantine and decontamination are per row, so doing them per shard
  changes nothing but where the work happens (`load_shard`, then `decontaminate_table` on
  the shard).
* Deduplication is order-dependent (earlier rows win), so only its per-row part runs per
  shard (`fingerprints`: the exact-match digest of the normalised text and the 14 MinHash
  band keys of the row's shingle set); `merge_dedup` then walks all rows in source order
  with the same rules as `dedup.dedup`: an exact digest of an earlier kept row, else a kept
  row sharing an LSH band with Jaccard >= threshold (exact Jaccard of the shingle sets,
  computed only for candidate pairs). Band keys are blake2b-8 digests of the band's
  datasketch values, so two rows share a bucket exactly when datasketch's MinHashLSH would
  put them in one (a 64-bit collision could only add a candidate, which the exact Jaccard
  then judges).

Tested against the unsharded `load_source` + `decontaminate_table` + `dedup`, directly and
through Dagster on the tiny recipe, in tests/e2e/test_sharding.py.
"""

from __future__ import annotations

import hashlib
import itertools
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from curation.dedup import (
    DROPPED_SCHEMA,
    DedupParams,
    jaccard,
    minhash_signatures,
    shingle_sets,
    text_column,
)
from curation.formats import FORMATS, canonical_record, detect_layout
from curation.schemas import DOMAIN_SCHEMAS, InvalidRow
from curation.sources import (
    DETECT_ROWS,
    LEGACY_READER_FORMATS,
    QUARANTINE_SCHEMA,
    READERS,
    LoadResult,
    Record,
    canonical_row,
    detect_reader,
    json_array,
    jsonl_lines,
)
from curation.text import normalize

ORDINAL = "_ordinal"  # position of the record in the source (0-based, blank lines not counted)
DIGEST, BANDS = "_digest", "_bands"


def shard_of(raw: bytes, shards: int) -> int:
    """The shard of a record: CRC32 of its raw bytes (a jsonl line without its newline) mod `shards`."""
    return zlib.crc32(raw) % shards


class ShardLoad(LoadResult):
    """The valid and quarantined rows of one shard of a source: a `LoadResult` whose table carries the
    int64 `_ordinal` column (position in the whole source), as does each quarantined row's `line`."""


def _records(path: Path | str, reader: str, split: str | None, limit: int | None, shard: int,
             shards: int) -> Iterator[tuple[int, Record]]:
    if reader == "jsonl" and json_array(Path(path)) is None:  # other shards' lines are never decoded
        yield from jsonl_lines(Path(path), limit, keep=lambda raw: shard_of(raw, shards) == shard)
        return
    for i, record in enumerate(READERS[reader](path, split, limit)):  # other readers: every record is read
        if shard_of(record[2].encode("utf-8", "backslashreplace"), shards) == shard:
            yield i, record


def load_shard(path: Path | str, format: str, domain: str, source_name: str, shard: int, shards: int,
               columns: Mapping[str, str] | None = None, split: str | None = None, limit: int | None = None,
               reader: str = "auto") -> ShardLoad:
    """`curation.sources.load_source` for the records of one shard (same arguments, plus the
    shard and shard count); the union of all shards' rows, in `_ordinal` order, is its table."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} out of range for {shards} shards")
    if domain not in DOMAIN_SCHEMAS:
        raise ValueError(f"unknown domain {domain!r} (known: {sorted(DOMAIN_SCHEMAS)})")
    schema = DOMAIN_SCHEMAS[domain]
    columns = dict(columns or {})
    if format in LEGACY_READER_FORMATS:
        format, reader = "canonical", format if reader == "auto" else reader
    reader = detect_reader(path) if reader == "auto" else reader
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r} (known: auto, {', '.join(sorted(READERS))})")
    if format == "auto":  # detected on the first rows of the whole source, as load_source does
        head = itertools.islice(READERS[reader](path, split, limit), DETECT_ROWS)
        format = detect_layout((obj for obj, reason, _ in head if reason is None), ignore=columns.values())
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r} (known: auto, {', '.join(sorted(FORMATS))})")
    names = [f.name for f in schema if f.name not in ("row_id", "source")]
    rows, ordinals, bad = [], [], []
    dropped: dict[str, int] = {}
    rows_in = 0
    for i, (obj, reason, raw) in _records(path, reader, split, limit, shard, shards):
        rows_in += 1
        if reason is None:
            try:
                rows.append(canonical_row(canonical_record(format, obj, names, columns), schema, source_name))
                ordinals.append(i)
                continue
            except InvalidRow as err:
                reason = err.reason
        dropped[reason] = dropped.get(reason, 0) + 1
        bad.append({"source": source_name, "line": i, "reason": reason,
                    "raw": raw.encode("utf-8", "backslashreplace").decode("utf-8")})
    table = pa.Table.from_pylist(rows, schema=schema).append_column(ORDINAL, pa.array(ordinals, pa.int64()))
    return ShardLoad(table, pa.Table.from_pylist(bad, schema=QUARANTINE_SCHEMA), rows_in, dropped, format, reader)


def _bands(num_perm: int, threshold: float, weights: tuple[float, float]) -> list[tuple[int, int]]:
    """datasketch MinHashLSH's band ranges for these settings."""
    from datasketch import MinHashLSH

    return list(MinHashLSH(threshold=threshold, num_perm=num_perm, weights=weights).hashranges)


def fingerprints(table: pa.Table, params: DedupParams | None = None, fields: Sequence[str] | None = None) -> pa.Table:
    """`table` plus the per-row dedup keys: `_digest` (blake2b-16 of the normalised text, null
    when exact dedup is off) and `_bands` (LSH band keys, null when the row has no shingle or
    near dedup is off). The order-dependent decisions are `merge_dedup`'s."""
    params = params or DedupParams()
    near = params.near
    texts = text_column(table.drop_columns([c for c in (ORDINAL,) if c in table.column_names]), fields)
    digests: list[bytes | None] = [None] * table.num_rows
    if params.exact:
        digests = [hashlib.blake2b(normalize(t).encode("utf-8"), digest_size=16).digest() for t in texts.to_pylist()]
    bands: list[list[int] | None] = [None] * table.num_rows
    if near.enabled and table.num_rows:
        sets = shingle_sets(texts, near.shingle_size)
        sigs = minhash_signatures(sets, near.num_perm, near.seed).astype(np.uint64)  # LeanMinHash keeps uint64
        ranges = _bands(near.num_perm, near.threshold, near.lsh_weights)
        for r, s in enumerate(sets):
            if len(s):
                row = sigs[r]
                bands[r] = [int.from_bytes(hashlib.blake2b(row[a:b].tobytes(), digest_size=8).digest(), "little")
                            for a, b in ranges]
    return table.append_column(DIGEST, pa.array(digests, pa.binary())).append_column(
        BANDS, pa.array(bands, pa.list_(pa.uint64())))


@dataclass
class MergeResult:
    """The rows kept after the global dedup, in source order, and one record per dropped row."""

    table: pa.Table
    """Kept rows, ORDINAL and fingerprint columns removed: equal to the unsharded `dedup` output."""
    dropped: pa.Table
    """DROPPED_SCHEMA rows (input 0), as `dedup` reports them."""

    def dropped_counts(self) -> dict[str, int]:
        """{reason: count}, as `DedupResult.dropped_counts(0)`."""
        rows = self.dropped.column("reason").to_pylist()
        return {r: rows.count(r) for r in sorted(set(rows))}


def merge_dedup(parts: Sequence[pa.Table], params: DedupParams | None = None,
                fields: Sequence[str] | None = None) -> MergeResult:
    """Exact and near-duplicate removal over the union of fingerprinted shards, in `_ordinal`
    order: the same rows kept and dropped as `dedup([union in source order])`."""
    params = params or DedupParams()
    near = params.near
    union = pa.concat_tables(parts) if parts else pa.table({ORDINAL: pa.array([], pa.int64())})
    union = union.take(np.argsort(np.asarray(union.column(ORDINAL)), kind="stable"))
    data = union.drop_columns([ORDINAL, DIGEST, BANDS])
    digests = union.column(DIGEST).to_pylist()
    bands = union.column(BANDS).to_pylist()
    ids = data.column("row_id").to_pylist() if "row_id" in data.column_names else [None] * data.num_rows
    texts = text_column(data, fields) if data.num_rows else None
    sets: dict[int, np.ndarray] = {}

    def shingles(g: int) -> np.ndarray:  # only rows that meet a candidate ever need their set
        if g not in sets:
            sets[g] = shingle_sets(texts.slice(g, 1), near.shingle_size)[0]
        return sets[g]

    seen: dict[bytes, str | None] = {}
    buckets: list[dict[int, list[int]]] = []
    kept_ids: list[str | None] = []
    key_of: list[int] = []
    keep = np.ones(data.num_rows, dtype=bool)
    dropped: list[dict[str, Any]] = []
    for g in range(data.num_rows):
        rid, digest, row_bands = ids[g], digests[g], bands[g]
        reason = dup_of = None
        if digest is not None and digest in seen:
            reason, dup_of = "exact_duplicate", seen[digest]
        elif near.enabled and row_bands is not None:
            if not buckets:
                buckets = [{} for _ in row_bands]
            candidates = set()
            for bucket, band in zip(buckets, row_bands):
                candidates.update(bucket.get(band, ()))
            best = max(((jaccard(shingles(g), shingles(key_of[k])), -k) for k in candidates), default=None)
            if best is not None and best[0] >= near.threshold:
                reason, dup_of = "near_duplicate", kept_ids[-best[1]]
            else:
                for bucket, band in zip(buckets, row_bands):
                    bucket.setdefault(band, []).append(len(kept_ids))
                kept_ids.append(rid)
                key_of.append(g)
        if reason is None:
            if digest is not None:
                seen.setdefault(digest, rid)
            continue
        keep[g] = False
        source = data.column("source")[g].as_py() if "source" in data.column_names else None
        dropped.append({"input": 0, "source": source, "row_id": rid, "reason": reason, "duplicate_of": dup_of})
    return MergeResult(data.filter(pa.array(keep)), pa.Table.from_pylist(dropped, schema=DROPPED_SCHEMA))


def raw_positions(parts_ordinals: Sequence[np.ndarray], ordinals: np.ndarray) -> np.ndarray:
    """Index of each of `ordinals` in the unsharded table of valid rows, given every shard's
    valid-row ordinals (decontamination reports rows by that index)."""
    everything = np.sort(np.concatenate([np.asarray(o, dtype=np.int64) for o in parts_ordinals])) \
        if parts_ordinals else np.zeros(0, np.int64)
    return np.searchsorted(everything, np.asarray(ordinals, dtype=np.int64))
