"""Streaming decontamination flags exactly the rows the plain set-of-strings reference flags."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from curation.decontam import decontaminate, decontaminate_table, reference_decontaminate
from curation.decontam_index import BenchmarkIndex
from curation.sources import load_benchmark

_GSM_LIKE = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."


def _corpus(bench_rows: list[dict], n_rows: int, seed: int) -> list[dict]:
    """Random prose; some rows carry a benchmark span, re-cased and re-punctuated."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(400)] + ["the", "a", "of", "to", "and", "café", "ﬁle", "İstanbul"]
    texts = [s for r in bench_rows for s in r.values() if isinstance(s, str)]
    rows = []
    for i in range(n_rows):
        body = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 60)))
        extra = None
        if i % 7 == 0:
            words = rng.choice(texts).split()
            k = rng.randint(0, max(0, len(words) - 12))
            span = " ".join(words[k : k + rng.choice([8, 9, 12])])  # 8 words must NOT match
            body = f"{body} {span.upper() if i % 2 else span}, more"
        if i % 5 == 0:
            extra = rng.choice(texts)[:80]
        rows.append({"id": i, "text": body, "note": extra})
    return rows


@pytest.fixture(scope="module")
def benchmarks() -> dict[str, pa.Table]:
    return {
        "humaneval": load_benchmark(builtin="humaneval").slice(0, 40),
        "gsm8k": load_benchmark(builtin="gsm8k").slice(0, 40),
        "custom": pa.table({"q": [_GSM_LIKE, "short"]}),
    }


@pytest.mark.parametrize("n", [9, 4])
def test_flags_exactly_the_reference_rows(benchmarks, n):
    bench_rows = {k: v.to_pylist() for k, v in benchmarks.items()}
    rows = _corpus([r for rs in bench_rows.values() for r in rs], 700, seed=n)
    index = BenchmarkIndex.build(benchmarks, n=n)
    table = pa.Table.from_pylist(rows)
    kept, dropped = decontaminate_table(table, index, batch_rows=97)  # many batches
    expected = reference_decontaminate(rows, bench_rows, n=n)
    assert [(c.row, c.benchmark, c.ngram, c.field) for c in dropped] == [
        (c.row, c.benchmark, c.ngram, c.field) for c in expected
    ]
    assert 20 < len(dropped) < 300  # the corpus really is partly contaminated
    flagged = {c.row for c in dropped}
    assert kept.column("id").to_pylist() == [i for i in range(len(rows)) if i not in flagged]


def test_fields_limit_the_checked_columns(benchmarks):
    index = BenchmarkIndex.build(benchmarks)
    table = pa.table({"a": ["nothing to see here"], "b": [_GSM_LIKE]})
    assert decontaminate_table(table, index, fields=["a"])[0].num_rows == 1
    kept, dropped = decontaminate_table(table, index)
    assert kept.num_rows == 0
    assert (dropped[0].benchmark, dropped[0].field) == ("custom", "b")
    assert dropped[0].ngram == "natalia sold clips to 48 of her friends in"
    with pytest.raises(KeyError):
        decontaminate_table(table, index, fields=["missing"])


def test_streaming_row_numbers_are_global(benchmarks):
    index = BenchmarkIndex.build(benchmarks)
    batches = [pa.record_batch({"t": ["clean text", _GSM_LIKE]}) for _ in range(3)]
    out = list(decontaminate(iter(batches), index))
    assert [c.row for o in out for c in o.dropped] == [1, 3, 5]
    assert [o.kept.num_rows for o in out] == [1, 1, 1]


def test_hash_hits_are_confirmed_by_text(benchmarks):
    index = BenchmarkIndex.build(benchmarks)
    h = int(index.hashes[0])
    assert index.benchmark_of(h, "a text that is not behind this hash") is None


# ---- any text: exact words, every profile, any number of workers ---------------------------------

import unicodedata  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from curation import decontam_text, decontam_unicode  # noqa: E402
from curation.decontam_text import iter_words  # noqa: E402
from curation.text import normalize_words  # noqa: E402

_PROFILES = {
    "short": "the of and to a in is it you that he was for on are with as i his they at be this".split(),
    "code": ["getUserById", "0x7fff1234abcd", "self.handler_map[key]", "HTTPRequestHandler", "__init__", "i++",
             "a1b2c3d4e5f6a7b8c9d0e1f2", "x==y", "{", "}", "->", "snake_case_identifier_name", "λx"],
    "multilingual": ["café", "naïve", "Straße", "ΣΟΦΟΣ", "σοφός", "Σίσυφος", "ΑΣ.", "'Σ'", "中文字符", "日本語", "привет",
                     "ПРИВЕТ", "مرحبا", "नमस्ते", "क्षत्रिय", "한국어", "ｆｕｌｌ", "ﬁle", "x²", "İstanbul", "e\u0301té",
                     "ｶﾞ", "Å", "½", "№5", "\u00a0", "“quoted”", "—", "’s", "😀", "Ⅻ", "ǅemal", "ᾼ", "ẞ", "Ⱥ", "\u3000"],
    "numeric": ["42", "3.14159", "1,000,000", "-7", "2024-01-05", "0.5%", "id12345", "١٢٣", "Ⅳ", "⑦"],
}
_FULLWIDTH = {c: chr(ord(c) + 0xFEE0) for c in map(chr, range(0x21, 0x7F))}


def _disguise(span: str, how: int) -> str:
    """A benchmark span, re-written: the same 9-grams (0-4) or a broken one (5-6)."""
    words = span.split()
    return [
        span.upper(),
        "“" + "\u00a0—\u3000".join(words) + "”",  # typographic separators
        "".join(_FULLWIDTH.get(c, c) for c in span),  # fullwidth: NFKC gives the ASCII back
        " ".join(w + "," for w in words),
        span.replace(" ", "\t\n"),
        " ".join(w + ("中" if i == 4 else "") for i, w in enumerate(words)),  # a CJK letter glues two words
        " ".join(w + ("\u0301" if i == 4 else "") for i, w in enumerate(words)),  # an accent changes a word
    ][how % 7]


def _profile_rows(bench_texts: list[str], profile: str, n_rows: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    vocab = _PROFILES[profile] + _PROFILES["short"][:5]
    rows = []
    for i in range(n_rows):
        size = rng.choice([0, 1, 3, 8, 30, 60]) if i % 97 else 20000  # very short and very long rows
        body = " ".join(rng.choice(vocab) for _ in range(size))
        if i % 5 == 0:
            words = rng.choice(bench_texts).split()
            k = rng.randint(0, max(0, len(words) - 14))
            span = _disguise(" ".join(words[k : k + rng.choice([8, 9, 14])]), i // 5)
            cut = rng.randint(0, len(body))
            body = body[:cut] + rng.choice([" ", "。", "—", "x"]) + span + " " + body[cut:]
        rows.append({"id": i, "title": rng.choice(vocab) if i % 3 else None, "text": body})
    return rows


def _as_tuples(found: list) -> list[tuple]:
    return [(c.row, c.benchmark, c.ngram, c.field) for c in found]


@pytest.mark.parametrize("profile", sorted(_PROFILES))
@pytest.mark.parametrize("n", [9, 3, 50])
def test_every_profile_flags_exactly_the_reference_rows(benchmarks, profile, n, monkeypatch):
    monkeypatch.setattr(decontam_text, "_CHUNK_BYTES", 3000)  # many chunks per batch
    bench = dict(benchmarks) | {"accents": pa.table({"q": ["Σοφός café naïve Straße 中文字符 déjà vu ΣΟΦΟΣ the end of it all"]})}
    bench_rows = {k: v.to_pylist() for k, v in bench.items()}
    texts = [s for rs in bench_rows.values() for r in rs for s in r.values() if isinstance(s, str)]
    rows = _profile_rows(texts, profile, 400, seed=n)
    table = pa.Table.from_pylist(rows)
    expected = _as_tuples(reference_decontaminate(rows, bench_rows, n=n, fields=["title", "text"]))
    if n == 9:
        assert len(expected) > 20  # the disguised spans are found ...
    for name in (["humaneval", "gsm8k", "custom"], list(bench)):  # ASCII benchmark words, then not only
        index = BenchmarkIndex.build({k: bench[k] for k in name}, n=n)
        want = _as_tuples(reference_decontaminate(rows, {k: bench_rows[k] for k in name}, n=n, fields=["title", "text"]))
        for workers in (1, 2):
            kept, dropped = decontaminate_table(table, index, ["title", "text"], batch_rows=150, workers=workers)
            assert _as_tuples(dropped) == want, (name, workers)
            flagged = {c.row for c in dropped}
            assert kept.column("id").to_pylist() == [i for i in range(len(rows)) if i not in flagged]
    assert expected == want


def _adversarial(alphabet: list[str], n_rows: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(n_rows)]


@pytest.mark.parametrize("alphabet", [
    ["a", "B", "Σ", "σ", "ς", "İ", "i", "ﬁ", "é", "e\u0301", "Ⱥ", "ẞ", "ß", "ｶ", "ﾞ", "가", "\u11a8", "\u1100", "\u1161",
     " ", "—", "’", "'", ".", "_", "1", "²", "½", "Ω", "Ω", "K", "क", "\u093f", "\u094d", "中", "😀", "\u0345", "ǅ",
     "ﬃ", "Ά", "\u0307", "-", "\n", "Ǆ", "𝐀", "Ⅻ", "٣", "\u0130\u0301"],
    ["Σ", "Σ", "a", "Α", "1", " ", ".", ":", "'", "^", "`", "ʰ", "\u00ad", "\u200d", "\u0345", "\u0301", "ς", "ᾼ", "x"],
    ["Σ", "a"] + ["'"] * 20 + [" ", "."],  # long runs of case-ignorables around capital sigmas
])
def test_words_are_the_definition_on_adversarial_text(alphabet, monkeypatch):
    monkeypatch.setattr(decontam_text, "_CHUNK_BYTES", 500)
    rows = _adversarial(alphabet, 6000, seed=len(alphabet))
    got: dict[int, list[str]] = {}
    for words in iter_words(pa.array(rows)):
        for i in range(len(words.starts)):
            got.setdefault(words.first_row + int(words.row[i]), []).append(words.text(i, i + 1))
    assert [got.get(i, []) for i in range(len(rows))] == [normalize_words(r) for r in rows]


def test_unicode_table_rules_hold_for_every_code_point():
    """What the per-code-point tables of decontam_unicode.py rely on, for this Python's Unicode."""
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    assert [c for c in chars if len(c.lower()) != 1] == ["\u0130"]  # the only multi-character lowercase
    assert not [c for c in chars if any(x.lower() != x for x in c.lower())]  # lowercase is idempotent
    assert not [c for c in chars if not unicodedata.normalize("NFKC", c)]  # nothing vanishes
    # Every character NFKC can compose with a preceding one is risky (so its row goes to Python).
    seconds = {int(d.split()[1], 16) for c in chars if (d := unicodedata.decomposition(c)) and d[0] != "<"
               and len(d.split()) == 2}
    seconds |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul vowels and trailing consonants
    assert all(decontam_unicode.char_entry(c) & decontam_unicode._RISKY for c in seconds)
    # The final-sigma flags, probed for many characters in one `str.lower`, equal one probe each.
    some = list(range(0x3000)) + [0x130, 0x1E9E, 0x2126, 0xFB01, 0x1D400]
    for c, entry in zip(some, decontam_unicode.char_entries(some)):
        cased = ("1" + chr(c) + "\u03a3").lower()[-1] == "\u03c2"
        ignorable = not cased and ("A" + chr(c) + "\u03a3").lower()[-1] == "\u03c2"
        assert (bool(entry & decontam_unicode._CASED), bool(entry & decontam_unicode._IGNORABLE)) == (cased, ignorable), c
    # Every character whose NFKC + lowercase holds an ASCII letter or digit is caught by ascii_makers.
    makers = [c for c in chars[0x80:] if any(x.isascii() and x.isalnum() for x in unicodedata.normalize("NFKC", c).lower())]
    assert len(makers) > 1000
    column = pa.array(makers + ["café ΣΟΦΟΣ 中文 ％ ，"])
    assert decontam_unicode.ascii_makers.rows(*decontam_unicode.string_bytes(column)).tolist() == [True] * len(makers) + [False]
    assert decontam_unicode.ascii_maker_rows(column).tolist() == [True] * len(makers) + [False]
    if unicodedata.unidata_version == decontam_unicode._ASCII_MAKER_RANGES[0]:  # the ranges the regex uses
        assert [c for a, b in decontam_unicode.ascii_maker_ranges() for c in range(a, b + 1)] == list(map(ord, makers))


def test_no_pandas_or_compute_wrappers_at_start_up(tmp_path):
    """`cascade decontam` start-up: pyarrow's conversions import pandas, pyarrow.compute wraps ~300 kernels."""
    import subprocess
    import sys

    pq.write_table(pa.table({"q": [_GSM_LIKE, "café ΣΟΦΟΣ " * 5, None]}), tmp_path / "t.parquet")
    code = (f"import sys, pyarrow.parquet as pq\nfrom curation.decontam import decontaminate\n"
            f"from curation.decontam_index import BenchmarkIndex\n"
            f"t = pq.ParquetFile({str(tmp_path / 't.parquet')!r}).read()\n"
            f"out = list(decontaminate(t.to_batches(), BenchmarkIndex.build({{'b': t}}), workers=2))\n"
            f"assert len(out[0].dropped) == 2, out\n"
            f"assert 'pandas' not in sys.modules and 'pyarrow.compute' not in sys.modules, 'heavy import'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_word_hashes_do_not_depend_on_chunking():
    texts = pa.array(["alpha beta " + "x" * 40 + " ünïcode gamma", "Δέλτα " * 3 + "verylongwordwithmanyletters"] * 50)
    whole = [(w.exact(), w.hashes) for w in iter_words(texts)]
    small = [(w.exact(), w.hashes) for w in iter_words(texts, chunk_bytes=40)]
    assert np.array_equal(np.concatenate([e for e, _ in whole]), np.concatenate([e for e, _ in small]))
    assert np.array_equal(np.concatenate([h for _, h in whole]), np.concatenate([h for _, h in small]))
