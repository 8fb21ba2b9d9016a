"""Synthetic but realistic corpora for the curation benchmarks (cached on disk).

Words come from real English: the docstrings of the Python standard library plus the
benchmark text itself, sampled with their natural (Zipf-like) frequencies. Documents mix
prose with capitals, punctuation and numbers, small code snippets, and ~3% non-ASCII text
(accents, curly quotes, ligatures). About 0.5% of documents carry a 10-30 word span of a
benchmark row, re-cased, so decontamination has real work to find.

`profile_corpus` makes corpora of other text for the decontamination benchmark, same layout
and the same planted spans (6-30 words, half upper-cased), ~10% of rows very short:

* short: ~250 common short English words (Zipf), 40% of rows with typographic quotes,
  a dash and an apostrophe (so they are not ASCII);
* code: 200k long identifiers (camelCase, SNAKE_CASE, dotted calls), hex literals and
  hashes, in indented lines with brackets and operators;
* multilingual: 400k made-up words in seven scripts (accented Latin, Cyrillic, Greek with
  capital sigmas, CJK runs, Arabic, Devanagari with combining marks, Hangul) and a few
  compatibility characters (fullwidth, ligatures, superscripts, dotted I);
* numeric: 500k numbers, decimals, thousands, percentages, dates, IPs and IDs in tables.
"""

from __future__ import annotations

import os
import pydoc
from functools import lru_cache
import re
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.parquet as pq

_MODULES = ("os", "re", "json", "collections", "itertools", "functools", "pathlib", "typing", "argparse",
            "subprocess", "threading", "asyncio", "unittest", "logging", "email", "http.client", "urllib.request",
            "decimal", "fractions", "statistics", "datetime", "sqlite3", "csv", "zipfile", "tarfile", "shutil")
_NON_ASCII = ["café", "naïve", "“quoted”", "—", "ﬁle", "déjà", "Zürich", "€5", "İstanbul", "façade", "½"]
_CODE = "def {f}(x, y):\n    # {c}\n    return x * {n} + y\n"


def cache_dir() -> Path:
    home = os.environ.get("CASCADE_HOME")
    path = Path(home) / "bench" if home else Path("/tmp/cascade_bench")
    path.mkdir(parents=True, exist_ok=True)
    return path


@lru_cache(maxsize=2)
def vocabulary(bench_texts: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Words and their sampling probabilities, from stdlib docstrings and benchmark text."""
    import importlib

    text = []
    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        text.append(pydoc.getdoc(module))
        text += [pydoc.getdoc(getattr(module, a)) for a in dir(module) if not a.startswith("_")][:200]
    words = re.findall(r"[A-Za-z][A-Za-z'-]*|\d+|[.,;:!?()]", " ".join(text + list(bench_texts)))
    uniq, counts = np.unique(np.array(words, dtype=object), return_counts=True)
    return uniq, counts / counts.sum()


def documents(n_docs: int, seed: int, bench_texts: list[str]) -> list[str]:
    """`n_docs` documents of 50-400 words."""
    rng = np.random.default_rng(seed)
    words, probs = vocabulary(tuple(bench_texts))
    lengths = rng.integers(50, 400, n_docs)
    flat = words[rng.choice(len(words), size=int(lengths.sum()), p=probs)].tolist()
    docs, pos = [], 0
    for i, k in enumerate(lengths.tolist()):
        doc = " ".join(flat[pos : pos + k])
        pos += k
        r = rng.random()
        if r < 0.03:
            doc = f"{doc} {_NON_ASCII[i % len(_NON_ASCII)]} {flat[pos - 1]}"
        elif r < 0.08:
            doc = doc + "\n\n" + _CODE.format(f=flat[pos - 2].lower().strip(".,;:!?()'") or "f", c=flat[pos - 3], n=i % 97)
        if rng.random() < 0.005:
            src = bench_texts[int(rng.integers(len(bench_texts)))].split()
            start = int(rng.integers(0, max(1, len(src) - 30)))
            span = " ".join(src[start : start + int(rng.integers(10, 31))])
            doc = f"{doc[: len(doc) // 2]} {span.upper() if i % 2 else span} {doc[len(doc) // 2 :]}"
        docs.append(doc)
    return docs


def corpus(megabytes: int, bench_texts: list[str], name: str = "corpus", docs_per_batch: int = 20000) -> Path:
    """A cached parquet corpus of about `megabytes` MB of text (columns id, title, text)."""
    path = cache_dir() / f"{name}_{megabytes}mb.parquet"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    schema = pa.schema([("id", pa.int64()), ("title", pa.string()), ("text", pa.string())])
    written, batch_no = 0, 0
    with pq.ParquetWriter(tmp, schema) as writer:
        while written < megabytes * 1_000_000:
            docs = documents(docs_per_batch, seed=batch_no, bench_texts=bench_texts)
            start = batch_no * docs_per_batch
            titles = [" ".join(d.split()[:6]).title() for d in docs]
            batch = pa.table({"id": np.arange(start, start + len(docs)), "title": titles, "text": docs}, schema=schema)
            writer.write_table(batch, row_group_size=5000)
            written += sum(len(d.encode()) for d in docs) + sum(len(t.encode()) for t in titles)
            batch_no += 1
    tmp.rename(path)
    return path


def batches(path: Path, rows: int = 5000) -> Iterator[pa.RecordBatch]:
    # pre_buffer=False: the default caches every read range, so RSS would grow with the file.
    yield from pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=rows)


# --- Profiles for the decontamination benchmark: same layout (id, title, text), different text. ---

_SHORT = ("the of and to a in is it you that he was for on are with as i his they be at one have this from or "
          "had by hot but some what there we can out other were all your when up use how said an each she which "
          "do their if will way about many then them would like so these her long make thing see him two has look "
          "more day go come did my no most who over know than call first may down side been now find any new "
          "part take get made live where after back only round man year came show also our me give good very "
          "just name form much great say help low line turn much mean old any same tell boy why ask men went "
          "read need land here home us move try kind hand off play big end put").split()
_LATIN = "abcdefghijklmnopqrstuvwxyzéèêëàâäçñöüßøåąłżśćęõãíóúýþðœæ"
_SCRIPTS = {  # (first code point, count) ranges used to make words
    "cyrillic": (0x0430, 32), "greek": (0x03B1, 25), "cjk": (0x4E00, 6000), "arabic": (0x0628, 20),
    "devanagari": (0x0915, 37), "hangul": (0xAC00, 2000), "latin": None,
}
_ODD = ["ｆｕｌｌ", "ﬁle", "x²", "Σίσυφος", "ΣΟΦΟΣ", "İzmir", "ǅemal", "ｶﾞ", "e\u0301t\u00e9", "Å", "１２３", "ﬃ", "№5"]
PROFILES = ("short", "code", "multilingual", "numeric")


def _zipf(rng: np.random.Generator, n: int) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1)
    return rng.permutation(p / p.sum())


def _code_vocab(rng: np.random.Generator, size: int) -> list[str]:
    """Long identifiers: camelCase joins, hex literals, hashes, dotted paths, long numbers."""
    parts = ["get", "set", "user", "request", "handler", "config", "buffer", "parse", "token", "stream", "index",
             "manager", "factory", "http", "json", "async", "cache", "node", "tree", "value", "error", "result"]
    out = []
    for i in range(size):
        kind = i % 6
        k = int(rng.integers(2, 6))
        pick = [parts[j] for j in rng.integers(0, len(parts), k)]
        if kind == 0:
            out.append(pick[0] + "".join(p.capitalize() for p in pick[1:]) + str(i))
        elif kind == 1:
            out.append("_".join(pick))
        elif kind == 2:
            out.append("0x" + format(int(rng.integers(1 << 40)), "x"))
        elif kind == 3:
            out.append(format(int(rng.integers(1 << 62)), "x") + format(int(rng.integers(1 << 62)), "x"))
        elif kind == 4:
            out.append(".".join(pick) + "()")
        else:
            out.append("".join(p.upper() for p in pick) + "_" + str(int(rng.integers(10**9))))
    return out


def _script_word(rng: np.random.Generator, script: str) -> str:
    if script == "latin":
        return "".join(_LATIN[j] for j in rng.integers(0, len(_LATIN), int(rng.integers(3, 12))))
    lo, count = _SCRIPTS[script]
    k = int(rng.integers(2, 14 if script == "cjk" else 10))
    word = "".join(chr(lo + int(j)) for j in rng.integers(0, count, k))
    if script == "greek" and rng.random() < 0.3:
        word = word.upper() + "Σ"  # capital sigma: final-sigma lower-casing
    if script == "devanagari" and rng.random() < 0.5:
        word += "\u093f\u094d"  # vowel sign i + virama (a combining mark)
    return word


def _multi_vocab(rng: np.random.Generator, size: int) -> list[str]:
    scripts = list(_SCRIPTS)
    vocab = [_script_word(rng, scripts[i % len(scripts)]) for i in range(size)]
    return vocab + [w.capitalize() for w in vocab[:1000]] + _ODD


def _numeric_vocab(rng: np.random.Generator, size: int) -> list[str]:
    forms = ("{:d}", "{:.2f}", "{:,d}", "-{:d}", "{:d}%", "2024-{:02d}-17", "{:d}.{:d}.{:d}.1", "id{:d}")
    out = []
    for i in range(size):
        v = int(rng.integers(0, 10 ** int(rng.integers(1, 10))))
        f = forms[i % len(forms)]
        out.append(f.format(v, v % 256, (v >> 8) % 256) if f.count("{") == 3 else f.format(v % 13 if "02d" in f else v))
    return out + ["total", "mean", "rows", "usd", "kg", "n", "id", "ms", "ok", "err"] * 5


@lru_cache(maxsize=4)
def profile_vocabulary(profile: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Words, sampling probabilities and separator style of one benchmark profile."""
    rng = np.random.default_rng(len(profile))
    if profile == "short":
        words = _SHORT + [w.capitalize() for w in _SHORT[:60]] + [",", ".", "!", "?", "'s"]
        sep = "prose"
    elif profile == "code":
        words = _code_vocab(rng, 200_000) + ["(", ")", "=", "{", "}", ";", "->", "return", "if", "for", "in"] * 20
        sep = "code"
    elif profile == "multilingual":
        words, sep = _multi_vocab(rng, 400_000), "prose"
    elif profile == "numeric":
        words, sep = _numeric_vocab(rng, 500_000), "table"
    else:
        raise ValueError(f"unknown profile {profile!r} (known: {PROFILES})")
    arr = np.array(words, dtype=object)
    return arr, _zipf(rng, len(arr)), sep


def profile_documents(profile: str, n_docs: int, seed: int, bench_texts: list[str]) -> list[str]:
    """`n_docs` documents of one profile: 1-600 words (some very short), ~0.5% carry a benchmark span."""
    rng = np.random.default_rng([seed, PROFILES.index(profile)])
    words, probs, sep = profile_vocabulary(profile)
    lengths = np.where(rng.random(n_docs) < 0.1, rng.integers(1, 12, n_docs), rng.integers(50, 600, n_docs))
    flat = words[rng.choice(len(words), size=int(lengths.sum()), p=probs)].tolist()
    joiner = {"prose": " ", "code": " ", "table": " | "}[sep]
    docs, pos = [], 0
    for i, k in enumerate(lengths.tolist()):
        chunk = flat[pos : pos + k]
        pos += k
        if sep == "code":  # lines of 8 tokens, indented
            doc = "\n".join("    " * (j % 3) + " ".join(chunk[j : j + 8]) for j in range(0, k, 8))
        else:
            doc = joiner.join(chunk)
        if sep == "prose" and rng.random() < 0.4:
            doc = f"“{doc}” — {chunk[0]}’s"  # typographic quotes, dash, apostrophe: real web text
        if rng.random() < 0.005:
            src = bench_texts[int(rng.integers(len(bench_texts)))].split()
            start = int(rng.integers(0, max(1, len(src) - 30)))
            span = " ".join(src[start : start + int(rng.integers(6, 31))])
            doc = f"{doc[: len(doc) // 2]} {span.upper() if i % 2 else span} {doc[len(doc) // 2 :]}"
        docs.append(doc)
    return docs


def profile_corpus(profile: str, megabytes: int, bench_texts: list[str], docs_per_batch: int = 250) -> Path:
    """A cached parquet corpus of one profile, about `megabytes` MB of text (columns id, title, text).

    Batch k always holds the same documents, so a smaller corpus is a prefix of a larger one."""
    path = cache_dir() / f"decontam_{profile}_{megabytes}mb.parquet"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    schema = pa.schema([("id", pa.int64()), ("title", pa.string()), ("text", pa.string())])
    written, batch_no, pending = 0, 0, []
    with pq.ParquetWriter(tmp, schema) as writer:
        while written < megabytes * 1_000_000:
            docs = profile_documents(profile, docs_per_batch, seed=batch_no, bench_texts=bench_texts)
            titles = [d[:48] for d in docs]
            start = batch_no * docs_per_batch
            pending.append(pa.table({"id": np.arange(start, start + len(docs)), "title": titles, "text": docs}, schema=schema))
            written += sum(pa.compute.sum(pa.compute.binary_length(pending[-1].column(c))).as_py() for c in ("title", "text"))
            batch_no += 1
            if len(pending) * docs_per_batch >= 5000 or written >= megabytes * 1_000_000:
                writer.write_table(pa.concat_tables(pending), row_group_size=5000)  # row groups of 5000 rows
                pending = []
    tmp.rename(path)
    return path
