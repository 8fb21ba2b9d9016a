"""Streaming decontamination flags exactly the rows the plain set-of-strings reference flags."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from curation.decontam import BenchmarkIndex, decontaminate, decontaminate_table, reference_decontaminate
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
