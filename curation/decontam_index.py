"""The benchmark side of decontamination: every n-gram hash, with the benchmark and text behind it.

Benchmark text goes through the same words and hashes as the corpus (decontam_text.py). The
index keeps: the sorted distinct n-gram hashes, with a bitmap over their low bits (they are
mixed) that rejects almost every corpus n-gram with one gather; a bitmap over the top bits
of the word fingerprints, so that only windows of n benchmark words are hashed at all; and,
per n-gram, where its text is, so that a hash hit is confirmed against the text (a 64-bit
collision can never drop a row) and attributed to the first benchmark holding it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa

from curation.decontam_text import Words, iter_words, ngram_hashes

DEFAULT_NGRAM = 9


def string_columns(schema: pa.Schema) -> list[str]:
    """Names of the string-typed columns of `schema`, in order."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]


def _bitmap_bits(count: int, per_entry: int) -> int:
    """Bits of a bitmap with about `per_entry` slots per entry (2^16 to 2^28 slots)."""
    return max(16, min(28, int(np.ceil(np.log2(max(count, 1) * per_entry)))))


class BenchmarkIndex:
    """Every n-gram hash of a set of benchmarks, with the benchmark and text behind each."""

    def __init__(self, n: int, names: Sequence[str], chunks: list[tuple[int, Words]]):
        self.n = n
        self.names = list(names)
        self._chunks = [w for _, w in chunks]
        parts = [ngram_hashes(w, n) for _, w in chunks]
        all_h = np.concatenate([h for h, _ in parts] + [np.zeros(0, np.uint64)])
        order = np.argsort(all_h, kind="stable")  # equal hashes stay in benchmark order
        self._entry_hash = all_h[order]
        self._entry_chunk = np.repeat(np.arange(len(parts)), [len(h) for h, _ in parts])[order]
        self._entry_first = np.concatenate([f for _, f in parts] + [np.zeros(0, np.int64)])[order]
        self._chunk_bench = [b for b, _ in chunks]
        self.hashes = np.unique(all_h)
        # N-gram hashes are mixed: their low bits index a bitmap.
        bits = _bitmap_bits(len(self.hashes), 32)
        self._mask = np.uint64((1 << bits) - 1)
        self._bitmap = np.zeros(1 << bits, dtype=bool)
        self._bitmap[self.hashes & self._mask] = True
        # Word fingerprints (x * K) are mixed upwards: their top bits index the vocabulary bitmap.
        vocab = np.unique(np.concatenate([w.hashes for _, w in chunks] + [np.zeros(0, np.uint64)]))
        bits = _bitmap_bits(len(vocab), 16)
        self._vocab_shift = np.uint64(64 - bits)
        self._vocab = np.zeros(1 << bits, dtype=bool)
        self._vocab[vocab >> self._vocab_shift] = True
        # Normalised text keeps bytes >= 0x80 only inside words: is every benchmark word ASCII?
        self.ascii_vocab = not any(np.any(w.buf >= 0x80) for _, w in chunks)

    @classmethod
    def build(
        cls,
        benchmarks: Mapping[str, pa.Table],
        n: int = DEFAULT_NGRAM,
        fields: Mapping[str, Sequence[str] | None] | None = None,
    ) -> "BenchmarkIndex":
        """Index `{name: table}`; `fields[name]` limits the hashed columns (default: all strings)."""
        if n < 1:
            raise ValueError("n must be >= 1")
        chunks = []
        names = list(benchmarks)
        for bench_id, name in enumerate(names):
            table = benchmarks[name]
            chosen = (fields or {}).get(name) or string_columns(table.schema)
            for field in chosen:
                chunks += [(bench_id, w) for w in iter_words(table.column(field))]
        return cls(n, names, chunks)

    def __len__(self) -> int:
        return len(self.hashes)

    def hits(self, hashes: np.ndarray) -> np.ndarray:
        """Positions in `hashes` whose value is an indexed n-gram hash."""
        maybe = np.flatnonzero(self._bitmap[hashes & self._mask])
        if not len(maybe) or not len(self.hashes):
            return maybe[:0]
        cand = hashes[maybe]
        pos = np.minimum(np.searchsorted(self.hashes, cand), len(self.hashes) - 1)
        return maybe[self.hashes[pos] == cand]

    def candidates(self, words: Words) -> np.ndarray:
        """First-word positions of the n-grams inside one row whose words are all (by
        fingerprint) benchmark words."""
        n = self.n
        known = np.flatnonzero(self._vocab[words.hashes >> self._vocab_shift])
        if len(known) < n:
            return known[:0]
        run = known[: len(known) - n + 1]
        run = run[known[n - 1 :] - run == n - 1]  # n consecutive known words
        return run[words.row[run] == words.row[run + n - 1]]

    def benchmark_of(self, h: int, text: str) -> str | None:
        """Benchmark containing the n-gram `text` (whose hash is `h`), or None."""
        key = np.uint64(h)
        lo, hi = (int(np.searchsorted(self._entry_hash, key, side=s)) for s in ("left", "right"))
        for e in range(lo, hi):  # stable order: the first benchmark wins
            first = int(self._entry_first[e])
            if self._chunks[self._entry_chunk[e]].text(first, first + self.n) == text:
                return self.names[self._chunk_bench[self._entry_chunk[e]]]
        return None
