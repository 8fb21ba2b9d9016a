"""N-gram decontamination against benchmark text, streaming over record batches.

A corpus row is dropped when any of its text fields shares at least one n-gram (default 9
normalised words, see text.py) with any string field of any benchmark row. For each
dropped row we record the benchmark and the offending n-gram: the first one in field
order, then word order, so the choice is deterministic and matches the plain reference.

Speed comes from never materialising n-gram strings on the hot path: n-gram hashes are
computed for a whole chunk at once (text.ngram_hashes), a bitmap over the low hash bits
rejects almost all of them with one gather, and only survivors are looked up exactly
(searchsorted) in the sorted benchmark hashes. Exact-hash hits are then confirmed against
the stored n-gram text, so a 64-bit collision can never drop a row.

Memory: the index (benchmark size) plus one record batch; nothing is kept per corpus row
except the dropped-row records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from curation.text import Tokens, iter_tokens, ngram_hashes, normalize_words

DEFAULT_NGRAM = 9


@dataclass(frozen=True)
class Contamination:
    """Why one corpus row was dropped."""

    row: int
    """0-based index of the row in the corpus stream."""
    benchmark: str
    """Benchmark sharing the n-gram (the first one, in index order, when several do)."""
    ngram: str
    """The offending n-gram: n normalised words joined by single spaces."""
    field: str
    """Corpus field the n-gram was found in."""

    def as_report(self) -> dict[str, Any]:
        """The `dropped` entry of the `cascade decontam` report."""
        return {"row": self.row, "benchmark": self.benchmark, "ngram": self.ngram}


def string_columns(schema: pa.Schema) -> list[str]:
    """Names of the string-typed columns of `schema`, in order."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]


class BenchmarkIndex:
    """Every n-gram hash of a set of benchmarks, with the benchmark and text behind each."""

    def __init__(self, n: int, names: Sequence[str], texts: dict[int, dict[str, int]]):
        self.n = n
        self.names = list(names)
        self._texts = texts  # hash -> {ngram text: benchmark id}
        self.hashes = np.array(sorted(texts), dtype=np.uint64)
        bits = max(16, min(28, int(np.ceil(np.log2(max(len(self.hashes), 1) * 32)))))
        self._mask = np.uint64((1 << bits) - 1)
        self._bitmap = np.zeros(1 << bits, dtype=bool)
        self._bitmap[self.hashes & self._mask] = True

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
        texts: dict[int, dict[str, int]] = {}
        names = list(benchmarks)
        for bench_id, name in enumerate(names):
            table = benchmarks[name]
            chosen = (fields or {}).get(name) or string_columns(table.schema)
            for field in chosen:
                for tok in iter_tokens(table.column(field)):
                    hashes, first = ngram_hashes(tok, n)
                    for h, i in zip(hashes.tolist(), first.tolist()):
                        texts.setdefault(h, {}).setdefault(tok.words(i, i + n), bench_id)
        return cls(n, names, texts)

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

    def benchmark_of(self, h: int, text: str) -> str | None:
        """Benchmark containing the n-gram `text` (whose hash is `h`), or None."""
        bench_id = self._texts.get(h, {}).get(text)
        return None if bench_id is None else self.names[bench_id]


@dataclass
class DecontBatch:
    """One record batch after decontamination."""

    kept: pa.RecordBatch
    """Rows without any benchmark n-gram, in input order."""
    dropped: list[Contamination]
    """One record per dropped row, ordered by row."""
    rows_in: int
    """Rows in the input batch."""


def _first_hits(tok: Tokens, index: BenchmarkIndex, field: str, offset: int, found: dict[int, Contamination]) -> None:
    """Record, for each row of `tok` not yet in `found`, its first confirmed n-gram."""
    n = index.n
    hashes, first = ngram_hashes(tok, n)
    cand = index.hits(hashes)
    if not len(cand):
        return
    rows = tok.first_row + tok.row[first[cand]]
    for p, r in zip(cand.tolist(), rows.tolist()):
        if r + offset in found:
            continue  # earlier field or earlier n-gram already decided this row
        i = int(first[p])
        text = tok.words(i, i + n)
        bench = index.benchmark_of(int(hashes[p]), text)
        if bench is not None:
            found[r + offset] = Contamination(r + offset, bench, text, field)


def decontaminate(
    batches: Iterable[pa.RecordBatch], index: BenchmarkIndex, fields: Sequence[str] | None = None
) -> Iterator[DecontBatch]:
    """Drop contaminated rows batch by batch (`fields` default: every string column)."""
    offset = 0
    for batch in batches:
        chosen = list(fields) if fields else string_columns(batch.schema)
        missing = [f for f in chosen if f not in batch.schema.names]
        if missing:
            raise KeyError(f"fields not in the input: {missing} (columns: {batch.schema.names})")
        found: dict[int, Contamination] = {}
        for field in chosen:
            column = batch.column(field)
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                raise TypeError(f"field {field!r} is {column.type}, not a string column")
            for tok in iter_tokens(column):
                _first_hits(tok, index, field, offset, found)
        keep = np.ones(batch.num_rows, dtype=bool)
        if found:
            keep[np.fromiter(found, dtype=np.int64) - offset] = False
        yield DecontBatch(batch.filter(pa.array(keep)), sorted(found.values(), key=lambda c: c.row), batch.num_rows)
        offset += batch.num_rows


def decontaminate_table(
    table: pa.Table, index: BenchmarkIndex, fields: Sequence[str] | None = None, batch_rows: int = 65536
) -> tuple[pa.Table, list[Contamination]]:
    """`decontaminate` for an in-memory table: (kept rows in order, dropped records)."""
    kept, dropped = [], []
    for out in decontaminate(table.to_batches(max_chunksize=batch_rows), index, fields):
        kept.append(out.kept)
        dropped += out.dropped
    return pa.Table.from_batches(kept, schema=table.schema), dropped


def reference_decontaminate(
    rows: Iterable[Mapping[str, Any]],
    benchmarks: Mapping[str, Iterable[Mapping[str, Any]]],
    n: int = DEFAULT_NGRAM,
    fields: Sequence[str] | None = None,
) -> list[Contamination]:
    """Plain Python oracle: sets of n-gram strings, no hashing, no numpy.

    Benchmarks contribute every string value of every row; a corpus row is checked on
    `fields` (default: every string value), in order.
    """
    owner: dict[str, str] = {}
    for name, bench_rows in benchmarks.items():
        for brow in bench_rows:
            for value in brow.values():
                if isinstance(value, str):
                    words = normalize_words(value)
                    for i in range(len(words) - n + 1):
                        owner.setdefault(" ".join(words[i : i + n]), name)
    dropped = []
    for r, row in enumerate(rows):
        keys = fields or [k for k, v in row.items() if isinstance(v, str)]
        hit = None
        for field in keys:
            value = row.get(field)
            words = normalize_words(value) if isinstance(value, str) else []
            for i in range(len(words) - n + 1):
                gram = " ".join(words[i : i + n])
                if gram in owner:
                    hit = Contamination(r, owner[gram], gram, field)
                    break
            if hit:
                break
        if hit:
            dropped.append(hit)
    return dropped
