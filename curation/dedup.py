"""Exact and near-duplicate removal, within and across tables.

Rows are visited in order: `reference` tables first (their rows are never dropped, they
only remove matching rows from the others, e.g. RL prompt sets against SFT corpora), then
`tables` in order. A row is dropped as `exact_duplicate` when the normalised text of its
fields (text.normalize) was seen before, else as `near_duplicate` when an earlier kept row
has a word-shingle Jaccard similarity >= threshold. Each drop names the row_id it repeats.

Near-dup pipeline: shingle hashes are text.ngram_hashes of `shingle_size` words truncated
to 32 bits (rows shorter than that are one shingle); MinHash signatures are computed for a
whole chunk of rows in numpy with datasketch's permutations and its "affine32" scheme, so
`minhash_signatures` equals `datasketch.MinHash(hashfunc=text.shingle_hash32)` bit for bit;
datasketch's MinHashLSH (fed LeanMinHash) proposes candidates, with weights leaning towards
recall; the exact Jaccard of the two shingle sets decides.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curation.text import iter_tokens, ngram_hash, ngram_hashes, normalize

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
class NearDupParams:
    """MinHash-LSH settings (mirrors the recipe's `curation.dedup.near`)."""

    enabled: bool = True
    """Run near-duplicate removal at all."""
    shingle_size: int = 5
    """Words per shingle."""
    num_perm: int = 128
    """MinHash permutations."""
    threshold: float = 0.8
    """Rows whose shingle-set Jaccard similarity is >= this are near-duplicates."""
    seed: int = 1
    """datasketch permutation seed (1 is datasketch's default)."""
    lsh_weights: tuple[float, float] = (0.1, 0.9)
    """(false positive, false negative) weights of the LSH band choice: favour recall, since
    every candidate is checked exactly anyway."""


@dataclass
class DedupParams:
    """What `dedup` removes (mirrors the recipe's `curation.dedup`)."""

    exact: bool = True
    """Drop rows whose normalised text repeats."""
    near: NearDupParams = field(default_factory=NearDupParams)
    """Near-duplicate settings."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DedupParams":
        """Build from the recipe's dedup mapping (`DedupConfig.model_dump()`)."""
        return cls(exact=data.get("exact", True), near=NearDupParams(**dict(data.get("near") or {})))


@dataclass
class DedupResult:
    """Kept rows per input table and one record per dropped row."""

    tables: list[pa.Table]
    """Kept rows of each input table, in order."""
    dropped: pa.Table
    """DROPPED_SCHEMA rows."""

    def dropped_counts(self, i: int) -> dict[str, int]:
        """{reason: count} for input table `i` (for manifests)."""
        rows = self.dropped.filter(pc.equal(self.dropped.column("input"), i)).column("reason").to_pylist()
        return {r: rows.count(r) for r in sorted(set(rows))}


@lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from datasketch import MinHash

    a, b = MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations
    return a.astype(np.uint32), b.astype(np.uint32)


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def shingle_sets(texts: pa.Array | pa.ChunkedArray, shingle_size: int) -> list[np.ndarray]:
    """Sorted unique 32-bit shingle hashes per row (empty for rows without words)."""
    out: list[np.ndarray] = []
    for tok in iter_tokens(texts):
        hashes, first = ngram_hashes(tok, shingle_size)
        rows = tok.row[first]
        counts = np.bincount(tok.row, minlength=tok.num_rows)
        short = np.flatnonzero((counts > 0) & (counts < shingle_size))
        if len(short):  # a row shorter than a shingle is one shingle of all its words
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            extra = [ngram_hash([tok.text(i, i + 1) for i in range(starts[r], starts[r] + counts[r])]) for r in short]
            hashes = np.concatenate([hashes, np.array(extra, dtype=np.uint64)])
            rows = np.concatenate([rows, short])
        key = np.sort((rows.astype(np.uint64) << np.uint64(32)) | (hashes & np.uint64(0xFFFFFFFF)))
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]  # unique (sorted input)
        bounds = np.searchsorted(key >> np.uint64(32), np.arange(tok.num_rows + 1, dtype=np.uint64))
        values = (key & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        out += [values[bounds[r] : bounds[r + 1]] for r in range(tok.num_rows)]
    return out


def minhash_signatures(sets: Sequence[np.ndarray], num_perm: int = 128, seed: int = 1, block: int = 1 << 13) -> np.ndarray:
    """uint32 [rows, num_perm] datasketch affine32 signatures of the shingle-hash sets."""
    a, b = _permutations(num_perm, seed)
    sigs = np.full((len(sets), num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    rows = np.flatnonzero(sizes)
    i = 0
    while i < len(rows):  # blocks of whole rows, about `block` shingles each
        j = i + max(1, int(np.searchsorted(np.cumsum(sizes[rows[i:]]), block, side="right")))
        chosen = rows[i:j]
        values = _fmix32(np.concatenate([sets[r] for r in chosen]))
        phv = np.multiply.outer(values, a)  # uint32 arithmetic wraps mod 2^32
        phv += b
        starts = np.concatenate(([0], np.cumsum(sizes[chosen])[:-1]))
        sigs[chosen] = np.minimum.reduceat(phv, starts, axis=0)
        i = j
    return sigs


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique hash arrays."""
    if not len(x) and not len(y):
        return 1.0
    inter = len(np.intersect1d(x, y, assume_unique=True))
    return inter / (len(x) + len(y) - inter)


def text_column(table: pa.Table, fields: Sequence[str] | None) -> pa.Array:
    """The dedup text of each row: `fields` (default `prompt` when present, else every string
    column but row_id/source) joined with newlines, nulls as empty strings."""
    chosen = list(fields) if fields else (["prompt"] if "prompt" in table.column_names else [
        f.name for f in table.schema if pa.types.is_string(f.type) and f.name not in ("row_id", "source")
    ])
    missing = [f for f in chosen if f not in table.column_names]
    if missing:
        raise KeyError(f"dedup fields {missing} not in columns {table.column_names}")
    cols = [pc.fill_null(table.column(f), "") for f in chosen]
    joined = cols[0] if len(cols) == 1 else pc.binary_join_element_wise(*cols, "\n")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def dedup(
    tables: Sequence[pa.Table],
    params: DedupParams | None = None,
    fields: Sequence[str] | None = None,
    reference: Sequence[pa.Table] = (),
) -> DedupResult:
    """Remove exact and near duplicates within and across `tables` (earlier rows win).

    `fields` default: `prompt` when present, else every string column but row_id/source.
    """
    params = params or DedupParams()
    near = params.near
    everything = list(reference) + list(tables)
    texts = [text_column(t, fields) for t in everything]
    ids = [t.column("row_id").to_pylist() if "row_id" in t.column_names else [None] * t.num_rows for t in everything]
    lsh = sets = sigs = None
    if near.enabled:
        from datasketch import LeanMinHash, MinHashLSH

        lsh = MinHashLSH(threshold=near.threshold, num_perm=near.num_perm, weights=near.lsh_weights)
        sets = [s for t in texts for s in shingle_sets(t, near.shingle_size)]
        sigs = minhash_signatures(sets, near.num_perm, near.seed)
    seen: dict[bytes, str | None] = {}
    kept_ids: list[str | None] = []  # LSH key -> row_id
    key_of: list[int] = []  # LSH key -> global row index
    dropped: list[dict[str, Any]] = []
    keep_masks = [np.ones(t.num_rows, dtype=bool) for t in everything]
    g = -1
    for t_index, (table, column) in enumerate(zip(everything, texts)):
        is_reference = t_index < len(reference)
        for r, text in enumerate(column.to_pylist()):
            g += 1
            rid = ids[t_index][r]
            reason = dup_of = None
            digest = hashlib.blake2b(normalize(text).encode("utf-8"), digest_size=16).digest() if params.exact else None
            if digest is not None and digest in seen:
                reason, dup_of = "exact_duplicate", seen[digest]
            elif lsh is not None and len(sets[g]):
                lean = LeanMinHash(seed=near.seed, hashvalues=sigs[g], scheme="affine32")
                best = max(((jaccard(sets[g], sets[key_of[k]]), -k) for k in lsh.query(lean)), default=None)
                if best is not None and best[0] >= near.threshold:
                    reason, dup_of = "near_duplicate", kept_ids[-best[1]]
                else:
                    lsh.insert(len(kept_ids), lean, check_duplication=False)
                    kept_ids.append(rid)
                    key_of.append(g)
            if reason is None or is_reference:
                if digest is not None:
                    seen.setdefault(digest, rid)
                continue
            keep_masks[t_index][r] = False
            source = table.column("source")[r].as_py() if "source" in table.column_names else None
            dropped.append({"input": t_index - len(reference), "source": source, "row_id": rid, "reason": reason, "duplicate_of": dup_of})
    kept = [t.filter(pa.array(m)) for t, m in zip(everything[len(reference):], keep_masks[len(reference):])]
    return DedupResult(kept, pa.Table.from_pylist(dropped, schema=DROPPED_SCHEMA))
