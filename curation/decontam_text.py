"""Words and n-gram hashes for decontamination: exact, vectorised, for any text.

The words are those of `text.normalize_words` (NFKC, lowercase, every non-alphanumeric
character -> space, split), found in the UTF-8 bytes of a 512 KB chunk of rows at once:
ASCII rows by byte arithmetic (A-Z -> a-z; letters and digits are word bytes), other rows
normalised first by decontam_unicode.py, after which every byte >= 0x80 is a word byte.

Hashes cost per word, not per byte. A word's bytes are read 8 at a time through an
unaligned uint64 view: pieces x_0, x_1, ... (little-endian, zero-padded), and

    hash(word) = sum_k x_k * (K + 2kG)  (mod 2^64),   fingerprint(word) = x_0 * K.

Words of at most 8 bytes (most words) have hash == fingerprint; the other pieces of longer
words are added only where an n-gram could match (`Words.exact`). An n-gram hash is fmix64
of the polynomial, base R, of its n word hashes. Hash equality is only ever a candidate:
decontam.py confirms every hit against the n-gram text.

Everything here is numpy over whole chunks and releases the GIL in its large operations,
so chunks run in threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

import numpy as np
import pyarrow as pa

from curation.decontam_unicode import arrow_mask, empty_string, kernel, normalise_rows, numpy_of, string_bytes
from curation.word_spans import WordSpans, fmix64_np, string_array

_U = np.uint64
_K = _U(0x9E3779B97F4A7C15)  # odd: multiplier of a word's first piece
_G = _U(0xC2B2AE3D27D4EB4F)  # step between the multipliers of later pieces
_R = _U(0xFF51AFD7ED558CCD)  # base of the n-gram polynomial
_CHUNK_BYTES = 1 << 19  # 512 KB of text: the int64 temporaries stay near the L2 cache
_MASKS = np.array([(1 << (8 * b)) - 1 for b in range(9)], dtype=np.uint64)  # low b bytes


def _pieces(view: np.ndarray, at: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """uint64 of the `nbytes` (at most 8 kept) bytes at each position `at`, zero-padded."""
    x = view[at]  # not np.take: it copies the whole (strided) view first
    x &= _MASKS[np.minimum(nbytes, 8)]
    return x


def _view(buf: np.ndarray) -> np.ndarray:
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf.data, strides=(1,))


@dataclass
class Words(WordSpans):
    """The normalised words of a run of rows: `hashes` are fingerprints (the hash of a word's first
    8 bytes; `exact` completes the long words), `buf` the normalised text plus 8 zero bytes."""

    long: np.ndarray
    """Indices of the words over 8 bytes (whose hash is more than their fingerprint)."""

    decode_errors: ClassVar[str] = "surrogatepass"  # lenient, unlike `Tokens` (strict)

    def exact(self, words: np.ndarray | None = None) -> np.ndarray:
        """Word hashes, exact for the long words among `words` (default: every word)."""
        idx = self.long if words is None else np.intersect1d(self.long, words, assume_unique=True)
        if not len(idx):
            return self.hashes
        starts, ends = self.starts[idx], self.ends[idx]
        count = (ends - starts - 1) // 8  # pieces after the first
        owner = np.repeat(np.arange(len(idx)), count)
        seg = np.cumsum(count) - count
        k = np.arange(len(owner)) - seg[owner] + 1
        at = starts[owner] + 8 * k
        part = _pieces(_view(self.buf), at, ends[owner] - at)
        part *= _K + k.astype(np.uint64) * (_G << _U(1))
        out = self.hashes.copy()
        out[idx] += np.add.reduceat(part, seg)
        return out


def _words(buf: np.ndarray, is_word: np.ndarray, offsets: np.ndarray, first_row: int) -> Words:
    rows = len(offsets) - 1
    # A non-word slot between rows (and at both ends), so that no word spans two rows.
    gapped = np.zeros(len(is_word) + rows + 1, dtype=bool)
    gapped[1:-1] = np.insert(is_word, offsets[1:-1], False)
    edges = np.flatnonzero(gapped[1:] != gapped[:-1])  # start, end, start, end, ... (gapped positions)
    starts, ends = edges[0::2], edges[1::2]
    per_row = np.diff(np.searchsorted(starts, offsets + np.arange(rows + 1)))
    row = np.repeat(np.arange(rows, dtype=np.int64), per_row)
    starts -= row  # back to positions in `buf`
    ends -= row
    length = ends - starts
    fingerprint = _pieces(_view(buf), starts, length)
    fingerprint *= _K
    return Words(first_row=first_row, row=row, starts=starts, ends=ends, hashes=fingerprint, buf=buf,
                 long=np.flatnonzero(length > 8))


def normalise_bytes(arr: pa.Array, ascii_mask: np.ndarray, ascii_words: bool = False
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lowercase UTF-8 bytes + 8 zero bytes, is-word-byte mask, row offsets) of a string chunk.

    `ascii_words`: skip the normalisation of non-ASCII rows and treat every non-ASCII byte as
    a separator (exact for ASCII rows; see `decontam` for when that is enough for the others)."""
    if not ascii_words and not ascii_mask.all():
        other = arrow_mask(~ascii_mask)
        fixed = normalise_rows(kernel("filter", [arr, other]))
        arr = kernel("replace_with_mask", [arr, other, fixed.cast(arr.type) if fixed.type != arr.type else fixed])
    raw, offsets = string_bytes(arr)
    n = len(raw)
    buf = np.zeros(n + 8, dtype=np.uint8)
    # x | 0x20 lowercases A-Z and keeps a-z and digits; other bytes matter only inside words,
    # where bytes >= 0x80 must stay (normalise_rows left them only inside words, lowercased).
    np.bitwise_or(raw, np.uint8(0x20), out=buf[:n])
    is_word = (buf[:n] - np.uint8(97)) < 26
    is_word |= (raw - np.uint8(48)) < 10
    if not ascii_words and not ascii_mask.all():
        high = raw >= 0x80
        is_word |= high
        np.copyto(buf[:n], raw, where=high)
    return buf, is_word, offsets


def prepare_column(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A string column as one `string` array with nulls as empty strings."""
    column = string_array(column)
    return kernel("coalesce", [column, empty_string(column.type)]) if column.null_count else column


def column_chunks(column: pa.Array, chunk_bytes: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) row ranges of about `chunk_bytes` (default `_CHUNK_BYTES`) of text each (at
    least one row each)."""
    chunk_bytes = chunk_bytes or _CHUNK_BYTES
    cum = np.cumsum(numpy_of(kernel("binary_length", [column])), dtype=np.int64)
    out, start, total = [], 0, len(column)
    while start < total:
        already = cum[start - 1] if start else 0
        stop = min(max(int(np.searchsorted(cum, already + chunk_bytes, side="right")), start + 1), total)
        out.append((start, stop))
        start = stop
    return out


def words_of(arr: pa.Array, ascii_mask: np.ndarray, first_row: int = 0, ascii_words: bool = False) -> Words:
    """The words of a run of rows (`ascii_mask`: which rows are ASCII; see `normalise_bytes`)."""
    return _words(*normalise_bytes(arr, ascii_mask, ascii_words), first_row)


def chunk_words(column: pa.Array, start: int, stop: int) -> Words:
    """The words of rows start..stop-1 of a `prepare_column` column."""
    arr = column.slice(start, stop - start)
    return words_of(arr, numpy_of(kernel("string_is_ascii", [arr])), start)


def iter_words(column: pa.Array | pa.ChunkedArray, chunk_bytes: int | None = None) -> Iterator[Words]:
    """Words of a string column, chunk by chunk (nulls have no words)."""
    column = prepare_column(column)
    for start, stop in column_chunks(column, chunk_bytes):
        yield chunk_words(column, start, stop)


def in_row_windows(words: Words, n: int) -> np.ndarray:
    """First-word positions of every n-gram inside one row."""
    m = len(words.hashes) - n + 1
    return np.flatnonzero(words.row[:m] == words.row[n - 1 :]) if m > 0 else np.zeros(0, np.int64)


def ngram_hashes(words: Words, n: int, at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """uint64 hashes of the n-grams starting at word positions `at` (default: every n-gram
    inside one row), and those positions."""
    first = in_row_windows(words, n) if at is None else at
    m = len(words.hashes) - n + 1
    if not len(first):
        return np.zeros(0, np.uint64), first
    if at is None or not len(words.long):
        h = words.exact()
    else:  # exact hashes only for the long words inside the windows
        last = np.searchsorted(first, words.long, side="right") - 1
        inside = (last >= 0) & (first[np.maximum(last, 0)] > words.long - n)
        h = words.exact(words.long[inside])
    if len(first) * 3 > m:  # dense: roll over every position, then keep the windows
        acc = h[:m].copy()
        for i in range(1, n):
            acc *= _R
            acc += h[i : i + m]
        return fmix64_np(acc[first]), first
    acc = h[first]
    for i in range(1, n):
        acc *= _R
        acc += h[first + i]
    return fmix64_np(acc), first
