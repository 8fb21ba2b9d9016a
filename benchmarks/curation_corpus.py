"""Synthetic but realistic corpora for the curation benchmarks (cached on disk).

Words come from real English: the docstrings of the Python standard library plus the
benchmark text itself, sampled with their natural (Zipf-like) frequencies. Documents mix
prose with capitals, punctuation and numbers, small code snippets, and ~3% non-ASCII text
(accents, curly quotes, ligatures). About 0.5% of documents carry a 10-30 word span of a
benchmark row, re-cased, so decontamination has real work to find.
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
