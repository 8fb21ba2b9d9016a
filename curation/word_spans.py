"""What the two tokenisers share: the input column, the span layout of the words, fmix64.

`curation.text.Tokens` (dedup) and `curation.decontam_text.Words` (decontamination) both find
the normalised words of a run of rows of one string array in one uint8 buffer; their
normalisations and word hashes differ on purpose, the input coercion, the layout and the
span -> text method do not. This module imports only numpy and pyarrow's core, so
decontamination keeps its light start-up (no `pyarrow.compute` at import, see
tests/curation/test_decontam.py::test_no_pandas_or_compute_wrappers_at_start_up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa

_U = np.uint64


def fmix64_np(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer over a uint64 array, in place (callers pass a fresh temporary)."""
    tmp = np.empty_like(h)
    for mult in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, None):
        np.right_shift(h, _U(33), out=tmp)
        np.bitwise_xor(h, tmp, out=h)
        if mult is not None:
            np.multiply(h, _U(mult), out=h)
    return h


def string_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A string column as one `string` array (`large_string` when over 2 GiB), nulls kept;
    TypeError for a column of another type."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_large_string(column.type) or pa.types.is_string_view(column.type):
        column = column.cast(pa.string()) if column.nbytes < (1 << 31) - 1 else column.cast(pa.large_string())
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise TypeError(f"expected a string column, got {column.type}")
    return column


@dataclass
class WordSpans:
    """The words of a run of rows (one chunk of a string column) as byte spans of one buffer."""

    first_row: int
    """Index, in the column, of the chunk's first row."""
    row: np.ndarray
    """int64 per word: row index relative to `first_row`."""
    starts: np.ndarray
    """int64 per word: byte offset of the word in `buf`."""
    ends: np.ndarray
    """int64 per word: byte offset just past the word."""
    hashes: np.ndarray
    """uint64 per word: the word's hash (each subclass says which)."""
    buf: np.ndarray
    """uint8 normalised text of the chunk; words are the `starts`/`ends` spans."""

    decode_errors: ClassVar[str] = "strict"  # how `text` decodes a word's bytes

    def text(self, i: int, j: int) -> str:
        """Words i..j-1 joined by single spaces (for reports and hit checks, never in hot loops)."""
        spans = zip(self.starts[i:j].tolist(), self.ends[i:j].tolist())
        return " ".join(self.buf[s:e].tobytes().decode("utf-8", self.decode_errors) for s, e in spans)
