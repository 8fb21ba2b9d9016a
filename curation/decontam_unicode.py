"""Non-ASCII text for decontamination: exact normalisation and a cheap ASCII-word check.

`normalise_rows` turns rows into their `text.normalize_words` form before splitting (NFKC,
lowercase, every non-alphanumeric character a space) for any text, without Python's
regular expression or word lists:

* Rows are decoded by Python's C codecs into one string and one uint32 code point array.
* Each code point is looked up in a table holding its normalised code point (lowercase if
  alphanumeric, else a space) and flags. The table is filled from Python once per new
  code point (`char_entries`: the running Python's `str.lower`, `str.isalnum`,
  `unicodedata` and final-sigma rule, so the same Unicode version as the reference).
* Capital sigma, whose lowercase depends on its neighbours, follows Python's rule in
  numpy (`_final_sigma`).
* A row holding a risky character is first normalised by Python's C functions
  (`unicodedata.normalize` then `str.lower`). Risky: NFKC may change or compose it
  (compatibility characters, combining marks, Hangul jamo) or its lowercase is two
  characters (dotted capital I). Most such rows (e.g. Hindi, with its combining marks) are
  already normalised: the check is all they cost. Otherwise a row is per-code-point and the
  table is exact (tests check the rules against every code point).

`ascii_makers` finds, in the raw UTF-8 bytes, the rows holding a character whose NFKC or
lowercase yields ASCII letters or digits: the only non-ASCII characters that can make an
ASCII word (decontam.py relies on it to skip normalising most non-ASCII rows).

Start-up matters to `cascade decontam`: arrays cross between arrow and numpy through their
buffers (pyarrow's own conversions, `to_numpy`, `pa.array`, `pa.scalar`, import pandas:
~0.4 s), and kernels are called by name (`pyarrow.compute` wraps ~300 of them on import).
"""

from __future__ import annotations

import codecs
import functools
import threading
import unicodedata

import numpy as np
import pyarrow as pa

try:
    from pyarrow._compute import MatchSubstringOptions, call_function as kernel
except ImportError:  # pragma: no cover - a pyarrow without the private module
    from pyarrow.compute import MatchSubstringOptions, call_function as kernel

# Table entry (uint32): the normalised code point in bits 0-20, flags above; the two that
# need attention on top, so one comparison finds them.
_CP_BITS = np.uint32((1 << 21) - 1)
_KNOWN, _WORD, _CASED, _IGNORABLE, _SIGMA, _RISKY = (np.uint32(1 << b) for b in range(21, 27))
_SIGMA_SCAN = 16  # sigma context scans further than this many case-ignorables go to Python


def numpy_of(arr: pa.Array) -> np.ndarray:
    """A primitive arrow array without nulls as numpy (booleans as a bool array)."""
    if pa.types.is_boolean(arr.type):
        bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")[arr.offset :].view(bool)
    return np.frombuffer(arr.buffers()[1], dtype=arr.type.to_pandas_dtype())[arr.offset : arr.offset + len(arr)]


def arrow_mask(mask: np.ndarray) -> pa.Array:
    """A numpy bool array as an arrow boolean array."""
    bits = np.packbits(mask, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def empty_string(kind: pa.DataType) -> pa.Scalar:
    """The scalar "" of a string type, built without `pa.scalar` (see above)."""
    width = np.int64 if kind == pa.large_string() else np.int32
    return pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(np.zeros(2, width)), pa.py_buffer(b"")])[0]


def string_bytes(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes, int64 row offsets from 0) of a string array without nulls."""
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = arr.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    return raw, offsets - offsets[0]


def _final_sigma_probe(chars: list[str], left: str) -> list[bool]:
    """For each character x, whether Python lowercases the sigma of `left + x + sigma` to a
    final sigma. All in one `str.lower` call: the "1" closing each probe is neither cased nor
    case-ignorable, so no context leaks between probes (every x lowercases to one character)."""
    low = "".join(left + x + "\u03a31" for x in chars).lower()
    return [low[4 * i + 2] == "\u03c2" for i in range(len(chars))]


def char_entries(cps: list[int]) -> list[int]:
    """Table entries of code points, asked of Python: the normalised code point (the
    lowercase if alphanumeric, else a space) and flags."""
    chars = [chr(c) for c in cps]
    lows = [x.lower() for x in chars]
    # Python's final-sigma rule, probed: is x cased (and not case-ignorable), or case-ignorable?
    one = [i for i, low in enumerate(lows) if len(low) == 1]  # (dotted I alone, below)
    cased, cased_or_ignorable = [False] * len(cps), [False] * len(cps)
    for i, a, b in zip(one, _final_sigma_probe([chars[i] for i in one], "1"), _final_sigma_probe([chars[i] for i in one], "A")):
        cased[i], cased_or_ignorable[i] = a, b
    for i in set(range(len(cps))) - set(one):
        cased[i] = ("1" + chars[i] + "\u03a3").lower()[-1] == "\u03c2"
        cased_or_ignorable[i] = ("A" + chars[i] + "\u03a3").lower()[-1] == "\u03c2"
    out = []
    for c, x, low, is_cased, either in zip(cps, chars, lows, cased, cased_or_ignorable):
        flags = _KNOWN | (_CASED if is_cased else _IGNORABLE if either else 0)
        if c == 0x3A3:
            flags |= _SIGMA  # capital sigma: final or not depends on the neighbours
        elif len(low) != 1:
            flags |= _RISKY  # dotted capital I: two characters
            low = x
        if (unicodedata.combining(x) or unicodedata.category(x)[0] == "M" or 0x1100 <= c <= 0x11FF
                or 0xA960 <= c <= 0xA97F or 0xD7B0 <= c <= 0xD7FF  # conjoining Hangul jamo: NFKC composes
                or unicodedata.normalize("NFKC", x) != x):
            flags |= _RISKY  # NFKC may change it or compose it with a neighbour
        out.append(int(flags | _WORD) | ord(low) if low.isalnum() else int(flags) | 0x20)
    return out


def char_entry(c: int) -> int:
    """`char_entries` of one code point."""
    return char_entries([c])[0]


class _CodePoints:
    """`char_entry` of every code point, filled on first sight (shared by threads)."""

    def __init__(self) -> None:
        self.table = np.zeros(0x110000, dtype=np.uint32)  # zero pages: only touched ones cost memory
        self._lock = threading.Lock()

    def lookup(self, cp: np.ndarray) -> np.ndarray:
        entries = np.take(self.table, cp)
        if len(entries) and entries.min() < _KNOWN:
            with self._lock:
                new = np.unique(cp[entries < _KNOWN])
                self.table[new] = char_entries(new.tolist())
            entries = np.take(self.table, cp)
        return entries


_CP = _CodePoints()


class _AsciiMakers:
    """Characters whose NFKC + lowercase holds an ASCII letter or digit (fullwidth forms,
    ligatures, super/subscripts, dotted capital I, ...: 1411 in Unicode 14), found in UTF-8
    without decoding everything. A character's first two bytes name a block (the character
    itself for 2-byte ones, 64 for 3-byte ones, 4096 for 4-byte ones); most text only meets
    blocks without any, and only characters of the other blocks are decoded and looked up.
    Both tables are filled from Python on first sight of a block."""

    def __init__(self) -> None:
        self.blocks = np.zeros(1 << 16, dtype=np.uint8)  # by first two bytes: 0 unknown, 1 none, 2 some
        self.chars = np.zeros(0x110000, dtype=bool)  # by code point (filled for blocks with some)
        self._lock = threading.Lock()

    @staticmethod
    def _block(key: int) -> range:
        b0, b1 = key >> 8, key & 0x3F
        if b0 < 0xE0:
            first, size = ((b0 & 0x1F) << 6) | b1, 1
        elif b0 < 0xF0:
            first, size = ((b0 & 0x0F) << 12) | (b1 << 6), 64
        else:
            first, size = ((b0 & 0x07) << 18) | (b1 << 12), 4096
        return range(first, min(first + size, 0x110000))

    def _verdicts(self, keys: np.ndarray) -> np.ndarray:
        verdict = self.blocks[keys]
        if not verdict.all():
            with self._lock:
                for k in keys[verdict == 0].tolist():
                    some = [c for c in self._block(k) if not 0xD800 <= c < 0xE000
                            and any(x.isascii() and x.isalnum() for x in unicodedata.normalize("NFKC", chr(c)).lower())]
                    self.chars[some] = True
                    self.blocks[k] = 2 if some else 1
            verdict = self.blocks[keys]
        return verdict

    def rows(self, raw: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Rows (by their byte `offsets`) holding such a character."""
        rows = np.zeros(len(offsets) - 1, dtype=bool)
        lead = np.flatnonzero(raw >= 0xC0)
        if not len(lead):
            return rows
        key = raw[lead].astype(np.uint16)
        key <<= 8
        key |= np.take(raw, lead + 1, mode="clip")
        seen = np.flatnonzero(np.bincount(key, minlength=1 << 16))  # the distinct keys: few
        if not (self._verdicts(seen) == 2).any():
            return rows
        at = lead[self.blocks[key] == 2]
        b0, b1, b2, b3 = (np.take(raw, at + k, mode="clip").astype(np.int64) & (0xFF if k == 0 else 0x3F)
                          for k in range(4))
        cp = np.where(b0 < 0xE0, ((b0 & 0x1F) << 6) | b1,
                      np.where(b0 < 0xF0, ((b0 & 0x0F) << 12) | (b1 << 6) | b2,
                               ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3))
        hit = at[self.chars[np.minimum(cp, 0x10FFFF)]]
        rows[np.searchsorted(offsets, hit, side="right") - 1] = True
        return rows


ascii_makers = _AsciiMakers()

# The same characters as code point ranges, for this Unicode version (Python 3.11's; tests
# check them against every code point): then one RE2 pass of arrow finds them, ~4x faster.
_ASCII_MAKER_RANGES = ("14.0.0", """
0xAA 0xB2-0xB3 0xB9-0xBA 0xBC-0xBE 0x130 0x132-0x133 0x13F-0x140 0x149 0x17F 0x1C4-0x1CC
0x1F1-0x1F3 0x2B0 0x2B2-0x2B3 0x2B7-0x2B8 0x2E1-0x2E3 0x1D2C 0x1D2E 0x1D30-0x1D31 0x1D33-0x1D3A
0x1D3C 0x1D3E-0x1D43 0x1D47-0x1D49 0x1D4D 0x1D4F-0x1D50 0x1D52 0x1D56-0x1D58 0x1D5B 0x1D62-0x1D65
0x1D9C 0x1DA0 0x1DBB 0x1E9A 0x2070-0x2071 0x2074-0x2079 0x207F-0x2089 0x2090-0x2093 0x2095-0x209C
0x20A8 0x2100-0x2103 0x2105-0x2106 0x2109-0x210E 0x2110-0x2113 0x2115-0x2116 0x2119-0x211D
0x2120-0x2122 0x2124 0x2128 0x212A 0x212C-0x212D 0x212F-0x2131 0x2133-0x2134 0x2139 0x213B
0x2145-0x2149 0x2150-0x217F 0x2189 0x2460-0x24EA 0x2C7C-0x2C7D 0x3250-0x325F 0x32B1-0x32CF
0x3358-0x337A 0x3380-0x33FF 0xA7F2-0xA7F4 0xFB00-0xFB06 0xFF10-0xFF19 0xFF21-0xFF3A 0xFF41-0xFF5A
0x107A5 0x1D400-0x1D454 0x1D456-0x1D49C 0x1D49E-0x1D49F 0x1D4A2 0x1D4A5-0x1D4A6 0x1D4A9-0x1D4AC
0x1D4AE-0x1D4B9 0x1D4BB 0x1D4BD-0x1D4C3 0x1D4C5-0x1D505 0x1D507-0x1D50A 0x1D50D-0x1D514
0x1D516-0x1D51C 0x1D51E-0x1D539 0x1D53B-0x1D53E 0x1D540-0x1D544 0x1D546 0x1D54A-0x1D550
0x1D552-0x1D6A3 0x1D7CE-0x1D7FF 0x1F100-0x1F10A 0x1F110-0x1F12E 0x1F130-0x1F14F 0x1F16A-0x1F16C
0x1F190 0x1FBF0-0x1FBF9
""")


def ascii_maker_ranges() -> list[tuple[int, int]]:
    """`_ASCII_MAKER_RANGES` as (first, last) code points."""
    return [(int(a, 16), int(b or a, 16)) for a, _, b in (r.partition("-") for r in _ASCII_MAKER_RANGES[1].split())]


@functools.cache
def _ascii_maker_pattern() -> MatchSubstringOptions | None:
    if unicodedata.unidata_version != _ASCII_MAKER_RANGES[0]:
        return None
    return MatchSubstringOptions("[" + "".join(rf"\x{{{a:x}}}-\x{{{b:x}}}" for a, b in ascii_maker_ranges()) + "]")


def ascii_maker_rows(arr: pa.Array) -> np.ndarray:
    """Rows of a string array (without nulls) holding a character whose NFKC + lowercase
    has an ASCII letter or digit."""
    pattern = _ascii_maker_pattern()
    if pattern is None:  # another Unicode version: the block tables
        return ascii_makers.rows(*string_bytes(arr))
    return numpy_of(kernel("match_substring_regex", [arr], pattern))


def _python_rows(text: str, cpo: np.ndarray, rows: np.ndarray, force: bool) -> tuple[str, np.ndarray] | None:
    """NFKC + lowercase the risky `rows` of `text` in Python; new (text, char offsets), or None."""
    new = {}
    for r in rows.tolist():
        s = text[cpo[r] : cpo[r + 1]]
        s2 = unicodedata.normalize("NFKC", s)
        s2 = s2.lower() if force or s2 != s or "\u0130" in s2 else s  # unchanged: the table is exact
        if s2 != s:
            new[r] = s2
    if not new:
        return None
    pieces, lengths, prev = [], np.diff(cpo), 0
    for r, s2 in new.items():
        pieces += [text[cpo[prev] : cpo[r]], s2]
        lengths[r] = len(s2)
        prev = r + 1
    pieces.append(text[cpo[prev] :])
    return "".join(pieces), np.concatenate([[0], np.cumsum(lengths)])


def _final_sigma(entries: np.ndarray, cpo: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Python's lowercase of the capital sigmas at `at` (final U+03C2 when the nearest
    non-case-ignorable character before it in its row is cased and the one after is not),
    and the rows where that search ran past `_SIGMA_SCAN` characters."""
    row = np.searchsorted(cpo, at, side="right") - 1
    final = np.ones(len(at), dtype=bool)
    unsure = np.zeros(len(at), dtype=bool)
    for step, bound in ((-1, cpo[row]), (1, cpo[row + 1] - 1)):
        pos, live = at.copy(), np.arange(len(at))
        for _ in range(_SIGMA_SCAN):
            pos[live] += step
            inside = pos[live] * step <= bound[live] * step
            ignorable = np.zeros(len(live), dtype=bool)
            ignorable[inside] = (entries[pos[live[inside]]] & _IGNORABLE) != 0
            cased = np.zeros(len(live), dtype=bool)
            cased[inside] = (entries[pos[live[inside]]] & _CASED) != 0
            # Before: final needs a cased one. After: final needs no cased one.
            decided = ~ignorable
            final[live[decided]] &= cased[decided] if step < 0 else ~cased[decided]
            live = live[ignorable]
            if not len(live):
                break
        unsure[live] = True
    return np.where(final, np.uint32(0x3C2), np.uint32(0x3C3)), np.unique(row[unsure])


def _utf8_rows(text: str, cpo: np.ndarray) -> pa.Array:
    """`text` cut at the character offsets `cpo`, as an arrow string array."""
    if len(cpo) * 64 < len(text):  # long rows: encode row by row, the lengths come free
        pieces = [text[a:b].encode("utf-8") for a, b in zip(cpo[:-1].tolist(), cpo[1:].tolist())]
        out = b"".join(pieces)
        offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)), out=offsets[1:])
    else:  # short rows: find the byte offset of every character
        out = text.encode("utf-8")
        data = np.frombuffer(out, dtype=np.uint8)
        starts = np.empty(len(text) + 1, dtype=np.int64)
        starts[:-1] = np.flatnonzero((data & np.uint8(0xC0)) != 0x80)
        starts[-1] = len(data)
        offsets = starts[cpo]
    kind, width = (pa.string(), np.int32) if len(out) < (1 << 31) else (pa.large_string(), np.int64)
    return pa.Array.from_buffers(kind, len(cpo) - 1, [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(out)])


def normalise_rows(arr: pa.Array) -> pa.Array:
    """Rows normalised but not split: NFKC, lowercase, every non-word character a space.

    In the result every byte >= 0x80 belongs to a word."""
    raw, _ = string_bytes(arr)
    text = codecs.utf_8_decode(raw)[0]
    cpo = np.zeros(len(arr) + 1, dtype=np.int64)
    np.cumsum(numpy_of(kernel("utf8_length", [arr])), out=cpo[1:])
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    entries = _CP.lookup(cps)
    odd = np.flatnonzero(entries >= _SIGMA)  # sigma or risky
    risky = odd[(entries[odd] & _RISKY) != 0]
    rows, force = np.unique(np.searchsorted(cpo, risky, side="right") - 1), False
    while True:
        fixed = _python_rows(text, cpo, rows, force) if len(rows) else None
        if fixed is not None:
            text, cpo = fixed
            cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            entries = _CP.lookup(cps)
            odd = np.flatnonzero(entries >= _SIGMA)
        sigma = odd[(entries[odd] & _SIGMA) != 0]
        values, rows = _final_sigma(entries, cpo, sigma) if len(sigma) else (None, rows[:0])
        if not len(rows):
            break
        force = True  # sigmas behind long runs of case-ignorables: Python lowercases those rows
    norm = entries & _CP_BITS
    if values is not None:
        norm[sigma] = values
    return _utf8_rows(codecs.utf_32_le_decode(norm)[0], cpo)
