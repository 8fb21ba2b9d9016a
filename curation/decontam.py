"""N-gram decontamination against benchmark text, streaming over record batches.

A corpus row is dropped when any of its text fields shares at least one n-gram (default 9
normalised words, see text.py) with any string field of any benchmark row. For each
dropped row we record the benchmark and the offending n-gram: the first one in field
order, then word order, so the choice is deterministic and matches the plain reference.

Speed comes from never materialising words or n-gram strings on the hot path: a 512 KB
chunk of text becomes word hashes in numpy (decontam_text.py, exact for any text), only
windows of n benchmark words get an n-gram hash, and those are looked up in the index
(decontam_index.py); the few hits are confirmed against the benchmark text.

Non-ASCII rows cost what ASCII rows cost when every benchmark word is ASCII (the usual
case): they are first read with each non-ASCII byte as a separator, which finds every
n-gram of ASCII words the exact normalisation would, and only rows with a hit or with a
character that normalises to ASCII letters or digits are normalised exactly
(`_chunk_hits`).

Chunks run on a thread pool (numpy and arrow release the GIL); results are merged in
field, row and word order, so any number of workers gives the same output. The pool works
on the next batch while the caller consumes the current one.

Memory: the index (benchmark size) plus about three record batches; nothing is kept per
corpus row except the dropped-row records.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from curation.decontam_index import DEFAULT_NGRAM, BenchmarkIndex, string_columns
from curation.decontam_text import Words, column_chunks, ngram_hashes, prepare_column, words_of
from curation.decontam_unicode import arrow_mask, ascii_maker_rows, kernel, numpy_of

__all__ = ["Contamination", "DecontBatch", "decontaminate", "decontaminate_table", "reference_decontaminate"]


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


@dataclass
class DecontBatch:
    """One record batch after decontamination."""

    kept: pa.RecordBatch
    """Rows without any benchmark n-gram, in input order."""
    dropped: list[Contamination]
    """One record per dropped row, ordered by row."""
    rows_in: int
    """Rows in the input batch."""


@dataclass
class _Hits:
    """N-grams of one chunk with an exact index hash (candidates until confirmed by text)."""

    rows: np.ndarray
    """Row of each n-gram, relative to the batch."""
    first: np.ndarray
    """Position of each n-gram's first word in its chunk (orders n-grams inside a row)."""
    hashes: np.ndarray
    texts: list[str]
    """The n-grams themselves (so the chunk's words need not be kept)."""

    def select(self, keep: np.ndarray) -> "_Hits":
        return _Hits(self.rows[keep], self.first[keep], self.hashes[keep],
                     [t for t, k in zip(self.texts, keep.tolist()) if k])


def _hits(index: BenchmarkIndex, words: Words, rows_of: np.ndarray | None = None) -> _Hits | None:
    """Index-hash hits among the n-grams of `words`; row numbers mapped through `rows_of`."""
    at = index.candidates(words)
    if not len(at):
        return None
    hashes, first = ngram_hashes(words, index.n, at)
    hit = index.hits(hashes)
    if not len(hit):
        return None
    first = first[hit]
    rows = words.row[first]
    rows = words.first_row + (rows if rows_of is None else rows_of[rows])
    return _Hits(rows, first, hashes[hit], [words.text(p, p + index.n) for p in first.tolist()])


def _chunk_hits(index: BenchmarkIndex, column: pa.Array, start: int, stop: int) -> list[_Hits]:
    """Hits of rows start..stop-1 of a column.

    With an ASCII-only benchmark vocabulary, non-ASCII rows are first read with every
    non-ASCII byte as a separator. That finds every n-gram of ASCII words the exact words
    have: normalised, a non-ASCII character is a separator or part of a non-ASCII word, and
    may absorb an ASCII letter (composition) but never yields one, unless NFKC or lowercase
    maps it to ASCII letters or digits (`ascii_maker_rows`). So only rows with such a character
    or with a hit are normalised exactly (tests/curation/test_decontam.py checks both)."""
    arr = column.slice(start, stop - start)
    ascii_rows = numpy_of(kernel("string_is_ascii", [arr]))
    approximate = index.ascii_vocab and not ascii_rows.all()
    words = words_of(arr, ascii_rows, start, ascii_words=approximate)
    found = _hits(index, words)
    if not approximate:
        return [found] if found else []
    other = ~ascii_rows
    if 2 * np.count_nonzero(other) < len(other):  # mostly ASCII: look at the other rows only
        recheck = np.zeros(len(arr), dtype=bool)
        recheck[other] = ascii_maker_rows(kernel("filter", [arr, arrow_mask(other)]))
    else:
        recheck = other & ascii_maker_rows(arr)
    out = []
    if found is not None:
        local = found.rows - start
        recheck[local[~ascii_rows[local]]] = True
        keep = ascii_rows[local]
        if keep.any():
            out.append(found.select(keep))
    if recheck.any():
        sub = kernel("filter", [arr, arrow_mask(recheck)])
        exact = _hits(index, words_of(sub, np.zeros(len(sub), dtype=bool), start), np.flatnonzero(recheck))
        out += [exact] if exact else []
    return out


def _confirm(found: dict[int, Contamination], index: BenchmarkIndex, field: str, offset: int,
             results: list[_Hits]) -> None:
    """Record, for each row of the chunk not yet in `found`, its first n-gram confirmed by text."""
    if not results:
        return
    rows = np.concatenate([h.rows for h in results])
    first = np.concatenate([h.first for h in results])
    hashes = np.concatenate([h.hashes for h in results])
    texts = [t for h in results for t in h.texts]
    for i in np.lexsort((first, rows)).tolist():  # row order, then word order
        r = int(rows[i]) + offset
        if r in found:
            continue  # an earlier field or n-gram already decided this row
        text = texts[i]
        bench = index.benchmark_of(int(hashes[i]), text)
        if bench is not None:
            found[r] = Contamination(r, bench, text, field)


def default_workers() -> int:
    """Threads for `decontaminate`: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _submit(pool: ThreadPoolExecutor | None, index: BenchmarkIndex, batch: pa.RecordBatch,
            fields: Sequence[str] | None) -> list[tuple[str, list[Future | Any]]]:
    chosen = list(fields) if fields else string_columns(batch.schema)
    missing = [f for f in chosen if f not in batch.schema.names]
    if missing:
        raise KeyError(f"fields not in the input: {missing} (columns: {batch.schema.names})")
    work = []
    for field in chosen:
        column = batch.column(field)
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise TypeError(f"field {field!r} is {column.type}, not a string column")
        column = prepare_column(column)
        spans = column_chunks(column)
        if pool is None:
            work.append((field, [_chunk_hits(index, column, a, b) for a, b in spans]))
        else:
            work.append((field, [pool.submit(_chunk_hits, index, column, a, b) for a, b in spans]))
    return work


def _finish(index: BenchmarkIndex, batch: pa.RecordBatch, work: list, offset: int) -> DecontBatch:
    found: dict[int, Contamination] = {}
    for field, results in work:  # field order, then chunk order, then word order
        for res in results:
            _confirm(found, index, field, offset, res.result() if isinstance(res, Future) else res)
    keep = np.ones(batch.num_rows, dtype=bool)
    if found:
        keep[np.fromiter(found, dtype=np.int64) - offset] = False
    return DecontBatch(kernel("filter", [batch, arrow_mask(keep)]), sorted(found.values(), key=lambda c: c.row), batch.num_rows)


def decontaminate(
    batches: Iterable[pa.RecordBatch], index: BenchmarkIndex, fields: Sequence[str] | None = None,
    workers: int | None = None,
) -> Iterator[DecontBatch]:
    """Drop contaminated rows batch by batch (`fields` default: every string column).

    `workers` threads (default: every core) hash chunks of text; the output does not depend on it."""
    workers = default_workers() if workers is None else max(1, workers)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="decontam") if workers > 1 else None
    try:
        offset, pending = 0, None
        for batch in batches:
            work = _submit(pool, index, batch, fields)  # runs while the previous batch is consumed
            if pending is not None:
                yield _finish(index, *pending)
            pending = (batch, work, offset)
            offset += batch.num_rows
        if pending is not None:
            yield _finish(index, *pending)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def decontaminate_table(
    table: pa.Table, index: BenchmarkIndex, fields: Sequence[str] | None = None, batch_rows: int = 65536,
    workers: int | None = None,
) -> tuple[pa.Table, list[Contamination]]:
    """`decontaminate` for an in-memory table: (kept rows in order, dropped records)."""
    kept, dropped = [], []
    for out in decontaminate(table.to_batches(max_chunksize=batch_rows), index, fields, workers):
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
    from curation.text import normalize_words  # the definition itself (its module loads pyarrow.compute)

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
