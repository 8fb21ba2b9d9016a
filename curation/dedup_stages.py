"""Deduplication as stages with bounded memory: keys → buckets → confirmed edges → clusters.

The one dedup algorithm of the project. `curation.dedup.dedup` runs these stages in one
process on in-memory tables; the sharded clean asset runs each stage as Dagster steps over
shards and key partitions (assets/shards.py), so both give the same rows. The layout follows
datatrove's MinHash pipeline (signatures, buckets, cluster, filter) and NeMo-Curator's
(LSH, buckets to edges, Jaccard, connected components):

1. **Keys** (`row_keys`, per shard): for every row at global position `pos` (its place in
   source order), one exact key (the first 8 bytes of the blake2b-16 digest of its normalised
   text) and one key per LSH band (a 64-bit mix of the band's MinHash values, datasketch's
   band ranges for the settings). `partition_of` sends each key to one of P partitions by
   its value, so a partition holds about rows × (bands + 1) / P keys.
2. **Buckets** (`candidate_pairs`, per partition): rows sharing a key form a bucket; each
   member is paired with the bucket's earliest row (a star, NeMo-Curator's buckets-to-edges),
   so pairs grow with the duplicates, not the square of the bucket.
3. **Confirmation** (`confirm_pairs`, per partition): a pair is an edge when the normalised
   texts are equal (`exact`) or the exact Jaccard similarity of the two shingle sets is at least
   the threshold (`near`): the MinHash keys only propose. Only the texts of candidate rows are
   fetched (`TextFetcher`).
4. **Clusters** (`cluster`, one step): connected components of all edges (scipy); the keeper of
   a component is its earliest row; every other row is removed as `exact_duplicate` when its
   normalised text equals the keeper's, else `near_duplicate`, and names the keeper as
   `duplicate_of`. Memory is proportional to the edges, not the rows.
5. **Filter** (a keep mask from the removed rows' `pos`, per shard or streamed): rows not removed stay,
   in source order.

Components are transitive (A~B and B~C remove C even when A and C are not similar), the
standard resolution of both anchors; the keeper rule makes the result independent of how the
rows were sharded or partitioned.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from curation.dedup_params import DedupParams
from curation.minhash import jaccard, minhash_signatures, shingle_sets
from curation.text import iter_tokens
from curation.word_spans import fmix64_np

EXACT_BAND = -1
"""`band` of an exact-text key."""
KEYS_SCHEMA = pa.schema([pa.field("band", pa.int16()), pa.field("key", pa.uint64()),
                         pa.field("pos", pa.int64()), pa.field("shard", pa.int32())])
PAIRS_SCHEMA = pa.schema([pa.field("a", pa.int64()), pa.field("a_shard", pa.int32()),
                          pa.field("b", pa.int64()), pa.field("b_shard", pa.int32())])
_END = [("", pa.int64()), ("_shard", pa.int32()), ("_id", pa.string()), ("_source", pa.string()),
        ("_digest", pa.binary())]
EDGES_SCHEMA = pa.schema([pa.field(f"{end}{suffix}", t) for end in "ab" for suffix, t in _END])
"""A confirmed duplicate pair: both ends' position, shard, row_id, source and text digest."""
REMOVED_SCHEMA = pa.schema([
    pa.field("pos", pa.int64()), pa.field("shard", pa.int32()), pa.field("row_id", pa.string()),
    pa.field("source", pa.string()), pa.field("reason", pa.string()), pa.field("duplicate_of", pa.string()),
])

TextFetcher = Callable[[int, np.ndarray], pa.Table]
"""(shard, sorted positions) -> a table with `pos`, `row_id`, `source` and `text` (the dedup
text) for those rows of that shard, in position order."""


@lru_cache(maxsize=8)
def band_ranges(num_perm: int, threshold: float, weights: tuple[float, float]) -> tuple[tuple[int, int], ...]:
    """datasketch MinHashLSH's band ranges for these settings."""
    from datasketch import MinHashLSH

    return tuple(MinHashLSH(threshold=threshold, num_perm=num_perm, weights=weights).hashranges)


_DIGEST_BASES = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))


def digests(texts: pa.Array) -> list[bytes]:
    """A 128-bit digest of each row's normalised words (the exact-duplicate identity: equal for
    equal `curation.text.normalize` output): two polynomial hashes, in different bases, of the
    row's word hashes and its word count, computed for all rows at once from the numpy
    tokenizer (`curation.text.iter_tokens`) instead of a Python normalisation per row."""
    out = np.zeros((len(texts), 2), dtype=np.uint64)
    for tok in iter_tokens(texts):
        counts = np.bincount(tok.row, minlength=tok.num_rows)
        first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        position = np.arange(len(tok.row), dtype=np.int64) - np.repeat(first, counts)
        rows = slice(tok.first_row, tok.first_row + tok.num_rows)
        for i, base in enumerate(_DIGEST_BASES):
            powers = np.cumprod(np.full(max(1, int(counts.max(initial=0))), base, dtype=np.uint64))
            terms = tok.hashes * powers[position]
            sums = np.zeros(tok.num_rows, dtype=np.uint64)
            has = counts > 0
            if len(terms):
                sums[has] = np.add.reduceat(terms, first[has])
            out[rows, i] = fmix64_np(sums ^ (counts.astype(np.uint64) * base))
    return [bytes(row) for row in out.astype("<u8").view(np.uint8).reshape(-1, 16)]


def row_keys(texts: pa.Array, positions: np.ndarray, shard: int, params: DedupParams) -> pa.Table:
    """KEYS_SCHEMA rows of one shard: an exact key per row (when exact dedup is on) and one key
    per LSH band per row with at least one shingle (when near dedup is on)."""
    positions = np.asarray(positions, dtype=np.int64)
    bands, keys, pos = [], [], []
    if params.exact and len(positions):
        first8 = np.frombuffer(b"".join(d[:8] for d in digests(texts)), dtype="<u8")
        bands.append(np.full(len(positions), EXACT_BAND, np.int16))
        keys.append(first8)
        pos.append(positions)
    near = params.near
    if near.enabled and len(positions):
        sets = shingle_sets(texts, near.shingle_size)
        has = np.array([len(s) > 0 for s in sets], dtype=bool)
        sigs = minhash_signatures(sets, near.num_perm, near.seed).astype(np.uint64)[has]
        for b, (lo, hi) in enumerate(band_ranges(near.num_perm, near.threshold, tuple(near.lsh_weights))):
            h = np.full(len(sigs), fmix64_np(np.array([b + 1], dtype=np.uint64))[0], dtype=np.uint64)
            for c in range(lo, hi):
                h = fmix64_np(h ^ sigs[:, c])
            bands.append(np.full(len(sigs), b, np.int16))
            keys.append(h)
            pos.append(positions[has])
    if not bands:
        return KEYS_SCHEMA.empty_table()
    n = sum(len(k) for k in keys)
    return pa.table({"band": np.concatenate(bands), "key": np.concatenate(keys), "pos": np.concatenate(pos),
                     "shard": np.full(n, shard, np.int32)}, schema=KEYS_SCHEMA)


def partition_of(keys: pa.Table, partitions: int) -> np.ndarray:
    """The partition of each key row: a mix of (band, key) mod `partitions`."""
    k = np.asarray(keys.column("key"), dtype=np.uint64)
    b = np.asarray(keys.column("band"), dtype=np.int64).astype(np.uint64)
    return (fmix64_np(k ^ (b * np.uint64(0xD6E8FEB86659FD93))) % np.uint64(partitions)).astype(np.int64)


def split_keys(keys: pa.Table, partitions: int) -> list[pa.Table]:
    """`keys` split into `partitions` tables by `partition_of`."""
    part = partition_of(keys, partitions) if keys.num_rows else np.zeros(0, np.int64)
    return [keys.filter(pa.array(part == j)) for j in range(partitions)]


def candidate_pairs(keys: pa.Table) -> pa.Table:
    """PAIRS_SCHEMA: (earliest member, other member) of every bucket of rows sharing a
    (band, key), unique pairs, sorted."""
    if keys.num_rows < 2:
        return PAIRS_SCHEMA.empty_table()
    band = np.asarray(keys.column("band"), dtype=np.int16)
    key = np.asarray(keys.column("key"), dtype=np.uint64)
    pos = np.asarray(keys.column("pos"), dtype=np.int64)
    shard = np.asarray(keys.column("shard"), dtype=np.int32)
    order = np.lexsort((pos, key, band))
    band, key, pos, shard = band[order], key[order], pos[order], shard[order]
    start = np.ones(len(pos), dtype=bool)
    start[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    first = np.maximum.accumulate(np.where(start, np.arange(len(pos)), 0))
    member = ~start & (pos != pos[first])
    a, b = pos[first][member], pos[member]
    a_shard, b_shard = shard[first][member], shard[member]
    if not len(a):
        return PAIRS_SCHEMA.empty_table()
    pairs = np.unique(np.stack([a, b, a_shard.astype(np.int64), b_shard.astype(np.int64)], axis=1), axis=0)
    return pa.table({"a": pairs[:, 0], "a_shard": pairs[:, 2].astype(np.int32),
                     "b": pairs[:, 1], "b_shard": pairs[:, 3].astype(np.int32)}, schema=PAIRS_SCHEMA)


@dataclass
class _Rows:
    """Fetched candidate rows: id, source, digest and shingle set by position."""

    ids: dict[int, str]
    sources: dict[int, str | None]
    digests: dict[int, bytes]
    sets: dict[int, np.ndarray]


def _fetch(pairs: pa.Table, fetch: TextFetcher, params: DedupParams) -> _Rows:
    ends = pa.concat_tables([
        pairs.select(["a", "a_shard"]).rename_columns(["pos", "shard"]),
        pairs.select(["b", "b_shard"]).rename_columns(["pos", "shard"]),
    ])
    rows = _Rows({}, {}, {}, {})
    shards = np.asarray(ends.column("shard"), dtype=np.int32)
    positions = np.asarray(ends.column("pos"), dtype=np.int64)
    for s in np.unique(shards):
        wanted = np.unique(positions[shards == s])
        got = fetch(int(s), wanted)
        got_pos = np.asarray(got.column("pos"), dtype=np.int64)
        if not np.array_equal(got_pos, wanted):
            raise ValueError(f"shard {s}: fetched rows {got_pos[:5]}... are not the requested {wanted[:5]}...")
        texts = got.column("text").combine_chunks() if isinstance(got.column("text"), pa.ChunkedArray) else got.column("text")
        sets = shingle_sets(texts, params.near.shingle_size) if params.near.enabled else [None] * len(wanted)
        for p, rid, src, d, st in zip(got_pos.tolist(), got.column("row_id").to_pylist(),
                                      got.column("source").to_pylist(), digests(texts), sets):
            rows.ids[p], rows.sources[p], rows.digests[p], rows.sets[p] = rid, src, d, st
    return rows


def confirm_pairs(pairs: pa.Table, fetch: TextFetcher, params: DedupParams) -> pa.Table:
    """EDGES_SCHEMA: the candidate pairs whose rows are exact duplicates (equal normalised text,
    when exact dedup is on) or near-duplicates (shingle-set Jaccard >= threshold, when near
    dedup is on)."""
    if not pairs.num_rows:
        return EDGES_SCHEMA.empty_table()
    rows = _fetch(pairs, fetch, params)
    out: dict[str, list] = {name: [] for name in EDGES_SCHEMA.names}
    for a, a_shard, b, b_shard in zip(*(pairs.column(c).to_pylist() for c in PAIRS_SCHEMA.names)):
        same = params.exact and rows.digests[a] == rows.digests[b]
        if not same and not (params.near.enabled and len(rows.sets[a]) and len(rows.sets[b])
                             and jaccard(rows.sets[a], rows.sets[b]) >= params.near.threshold):
            continue
        for end, p, shard in (("a", a, a_shard), ("b", b, b_shard)):
            for suffix, value in (("", p), ("_shard", shard), ("_id", rows.ids[p]), ("_source", rows.sources[p]),
                                  ("_digest", rows.digests[p])):
                out[end + suffix].append(value)
    return pa.table(out, schema=EDGES_SCHEMA)


def cluster(edges: Sequence[pa.Table], protected_below: int = 0) -> pa.Table:
    """REMOVED_SCHEMA: every row of a connected component of `edges` but its earliest, sorted by
    position. Rows at positions below `protected_below` (reference tables) are never removed."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    table = pa.concat_tables([e.cast(EDGES_SCHEMA) for e in edges]) if edges else EDGES_SCHEMA.empty_table()
    if not table.num_rows:
        return REMOVED_SCHEMA.empty_table()
    a = np.asarray(table.column("a"), dtype=np.int64)
    b = np.asarray(table.column("b"), dtype=np.int64)
    nodes, index = np.unique(np.concatenate([a, b]), return_inverse=True)
    ia, ib = index[: len(a)], index[len(a):]
    graph = coo_matrix((np.ones(len(a), np.int8), (ia, ib)), shape=(len(nodes), len(nodes)))
    _, label = connected_components(graph, directed=False)
    keeper = np.full(label.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(keeper, label, np.arange(len(nodes)))  # nodes are sorted: smallest index = earliest row
    info: dict[int, tuple] = {}  # node index -> (shard, id, source, digest); every node is an end of some edge
    for end, idx in (("a", ia), ("b", ib)):
        cols = [table.column(f"{end}{suffix}").to_pylist() for suffix in ("_shard", "_id", "_source", "_digest")]
        for i, values in zip(idx.tolist(), zip(*cols)):
            info.setdefault(i, values)
    out: dict[str, list] = {name: [] for name in REMOVED_SCHEMA.names}
    for n in range(len(nodes)):
        k = int(keeper[label[n]])
        if k == n or nodes[n] < protected_below:
            continue
        shard, rid, source, digest = info[n]
        out["pos"].append(int(nodes[n]))
        out["shard"].append(shard)
        out["row_id"].append(rid)
        out["source"].append(source)
        out["reason"].append("exact_duplicate" if digest == info[k][3] else "near_duplicate")
        out["duplicate_of"].append(info[k][1])
    return pa.table(out, schema=REMOVED_SCHEMA)
