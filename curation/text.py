"""Text normalisation and stable word / n-gram hashes, scalar and vectorised.

The definition: Unicode NFKC, lowercase, every non-alphanumeric character becomes
a space, whitespace collapses, split on spaces; digits stay. `normalize_words` is that
definition in plain Python. `iter_tokens` computes the same words (and their hashes) for a
whole arrow string column in numpy:

* ASCII rows (almost all of a real corpus) are normalised by byte arithmetic
  (A-Z -> a-z, letters and digits kept, everything else -> space), which is exactly what
  NFKC + lower + isalnum do to ASCII. Non-ASCII rows go through `normalize_words` first,
  so Unicode corner cases (final sigma, dotted capital I, ligatures) follow Python exactly.
* A word's hash is fmix64 of its polynomial hash mod 2^64, computed for every word at
  once from a prefix sum of `byte * P^-i` (P odd, hence invertible mod 2^64).
* An n-gram's hash is fmix64 of the polynomial, base R, of its n word hashes.

Work is done in chunks of about 1 MB of text: large temporaries cost more in page faults
than the arithmetic itself. Every function here has a scalar twin used by tests, by the
plain reference decontaminator, and as datasketch's `hashfunc` (`shingle_hash32`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curation.word_spans import WordSpans, fmix64_np, string_array

_MASK64 = (1 << 64) - 1
_P = 0x100000001B3  # FNV-64 prime: odd, so invertible mod 2^64
_P_INV = pow(_P, -1, 1 << 64)
_R = 0x9E3779B97F4A7C15  # golden-ratio constant, base of the n-gram polynomial
_U = np.uint64
_CHUNK_BYTES = 1 << 19
# `[\W_]` is exactly "not str.isalnum()" for str patterns.
_NON_ALNUM = re.compile(r"[\W_]+")


def normalize_words(text: str) -> list[str]:
    """The normalisation as words.

    >>> normalize_words("Ünïcode—NFKC: ﬁle_name 42!")
    ['ünïcode', 'nfkc', 'file', 'name', '42']
    """
    return _NON_ALNUM.sub(" ", unicodedata.normalize("NFKC", text).lower()).split()


def normalize(text: str) -> str:
    """Normalised text: the words of `normalize_words` joined by single spaces."""
    return " ".join(normalize_words(text))


def _fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK64
    return h ^ (h >> 33)


def word_hash(word: str) -> int:
    """Stable 64-bit hash of one normalised word (its UTF-8 bytes)."""
    acc = 0
    for byte in word.encode("utf-8"):
        acc = (acc * _P + byte) & _MASK64
    return _fmix64(acc)


def ngram_hash(words: Sequence[str]) -> int:
    """Stable 64-bit hash of a sequence of normalised words (any length)."""
    acc = 0
    for w in words:
        acc = (acc * _R + word_hash(w)) & _MASK64
    return _fmix64(acc)


def shingle_hash32(shingle: bytes | str) -> int:
    """32-bit hash of a space-joined shingle: datasketch `hashfunc` twin of our signatures."""
    if isinstance(shingle, bytes):
        shingle = shingle.decode("utf-8")
    return ngram_hash(shingle.split(" ")) & 0xFFFFFFFF



class _Powers:
    """P^i and P^-i mod 2^64 for i < size, grown on demand (shared by all calls)."""

    def __init__(self) -> None:
        self.pos = np.ones(1, dtype=np.uint64)
        self.inv = np.ones(1, dtype=np.uint64)

    def ensure(self, size: int) -> None:
        if size <= len(self.pos):
            return
        size = max(size, 2 * len(self.pos))
        for name, base in (("pos", _P), ("inv", _P_INV)):
            arr = np.full(size, base, dtype=np.uint64)
            arr[0] = 1
            setattr(self, name, np.cumprod(arr))  # integer products wrap mod 2^64


_POWERS = _Powers()


@dataclass
class Tokens(WordSpans):
    """The normalised words of a run of rows: `hashes` are `word_hash`es, `buf` the case-folded text."""

    num_rows: int
    """Rows in the chunk (rows without words included)."""


def _normalised_chunk(arr: pa.Array, ascii_mask: np.ndarray) -> pa.Array:
    """Replace the non-ASCII rows of `arr` by their Python-normalised text."""
    if ascii_mask.all():
        return arr
    non_ascii = pa.array(~ascii_mask)
    fixed = [normalize(s) for s in pc.filter(arr, non_ascii).to_pylist()]
    return pc.replace_with_mask(arr, non_ascii, pa.array(fixed, type=arr.type))


def _tokenize_chunk(arr: pa.Array, first_row: int, ascii_mask: np.ndarray) -> Tokens:
    arr = _normalised_chunk(arr, ascii_mask)
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = arr.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    offsets -= offsets[0]
    n = len(raw)
    # ASCII case folding and the alphanumeric test by arithmetic (faster than a table
    # gather); bytes >= 0x80 only occur in rows already normalised in Python, inside words.
    upper = (raw - np.uint8(65)) < 26
    buf = raw | (upper.view(np.uint8) << np.uint8(5))
    is_word = upper | ((buf - np.uint8(97)) < 26) | ((raw - np.uint8(48)) < 10) | (raw >= 128)
    padded = np.zeros(n + 2, dtype=bool)
    padded[1:-1] = is_word
    edges = np.flatnonzero(padded[1:] != padded[:-1])  # start, end, start, end, ...
    starts, ends = edges[0::2], edges[1::2]
    # A word never spans two rows: split words glued across a row boundary.
    inner = offsets[1:-1]
    inner = inner[(inner > 0) & (inner < n)]
    glued = np.unique(inner[is_word[inner] & is_word[inner - 1]])  # empty rows repeat offsets
    if len(glued):
        starts = np.insert(starts, np.searchsorted(starts, glued), glued)
        ends = np.insert(ends, np.searchsorted(ends, glued), glued)
    _POWERS.ensure(n + 1)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    np.multiply(buf, _POWERS.inv[:n], out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    hashes = prefix[ends]
    hashes -= prefix[starts]
    hashes *= _POWERS.pos[ends - 1]
    per_row = np.diff(np.searchsorted(starts, offsets))
    row = np.repeat(np.arange(len(arr), dtype=np.int64), per_row)
    return Tokens(first_row=first_row, row=row, starts=starts, ends=ends, hashes=fmix64_np(hashes), buf=buf,
                  num_rows=len(arr))


def iter_tokens(column: pa.Array | pa.ChunkedArray, chunk_bytes: int = _CHUNK_BYTES) -> Iterator[Tokens]:
    """Tokenise a string column in chunks of whole rows of about `chunk_bytes` of text."""
    column = pc.fill_null(string_array(column), "")  # a null has no words
    lengths = np.asarray(pc.binary_length(column), dtype=np.int64)
    ascii_mask = np.asarray(pc.string_is_ascii(column), dtype=bool)
    cum = np.cumsum(lengths)
    start = 0
    total = len(column)
    while start < total:
        already = cum[start - 1] if start else 0
        stop = int(np.searchsorted(cum, already + chunk_bytes, side="right"))
        stop = min(max(stop, start + 1), total)
        yield _tokenize_chunk(column.slice(start, stop - start), start, ascii_mask[start:stop])
        start = stop


def ngram_hashes(tokens: Tokens, n: int) -> tuple[np.ndarray, np.ndarray]:
    """uint64 hashes of every n-gram inside one row, and the index of each n-gram's first word."""
    m = len(tokens.hashes) - n + 1
    if m <= 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    acc = tokens.hashes[:m].copy()
    r = _U(_R)
    for i in range(1, n):
        acc *= r
        acc += tokens.hashes[i : i + m]
    first = np.flatnonzero(tokens.row[:m] == tokens.row[n - 1 :])
    return fmix64_np(acc[first]), first
