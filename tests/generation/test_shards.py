"""Sharded generation in the library (generation.shards): the row assignment is a stable
partition, and N shards generated separately (each with its own engine and a fresh cache), then
merged, give the unsharded run's records, filter output, drop counts and content hash, for a
rejection filter with the real math verifier and for the pass-rate filter."""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from fake_engine import FakeEngine

from curation.content_hash import content_hash
from generation.cache import GenerationCache
from generation.engine import Sampling
from generation.filters import PassRateBand, Verifier, pass_rate_filter, rejection_sample
from generation.pipeline import GenerationStats, generate_rows
from generation.shards import (
    RECORD_SCHEMA,
    assignment,
    merged_records,
    merged_stats,
    records_table,
    shard_of,
    shard_rows,
)

SAMPLING = Sampling(max_new_tokens=40, temperature=1.0, seed=3)
MODES = ("think", "no_think")


def responder(prompt: str, i: int, seed: int) -> str:
    """Per (prompt, sample, seed): right, wrong, truncated or malformed answers to 'What is A + B?'."""
    import re

    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", prompt).groups())
    pick = zlib.crc32(f"{prompt}|{i}|{seed}".encode()) % 4
    answer = [f"\\boxed{{{a + b}}}", f"\\boxed{{{a + b + 1}}}", "x" * 60, ""][pick]
    return answer if " /no_think<|im_end|>" in prompt else f"<think>sum</think>{answer}"


def rows(n: int = 23) -> pa.Table:
    return pa.Table.from_pylist([{"row_id": f"m{i}", "source": "math", "prompt": f"What is {i} + {3 * i}?",
                                  "answer": str(4 * i)} for i in range(n)])


@pytest.fixture(scope="module")
def verifier():
    v = Verifier.from_registry("math", threshold=1.0)
    yield v
    v.close()


def _filter(use: str, records, verifier: Verifier, schema: pa.Schema, stats: GenerationStats):
    if use == "rejection":
        return rejection_sample(records, "math", verifier, max_per_prompt=1, stats=stats)
    return pass_rate_filter(records, verifier, PassRateBand(min_rate=0.3), schema=schema, stats=stats)


def _generate(table: pa.Table, cache_dir: Path, stats: GenerationStats, engine: FakeEngine):
    cache = GenerationCache(cache_dir)
    yield from generate_rows(engine, "m1", table, MODES, 3, SAMPLING, cache, stats=stats, batch_size=4)
    cache.close()


def test_assignment_is_a_stable_partition() -> None:
    table = rows()
    assert shard_of("m0", 3) == zlib.crc32(b"m0") % 3 and shard_of("m0", 1) == 0
    for n in (1, 2, 3, 7):
        parts = [shard_rows(table, k, n) for k in range(n)]
        positions = sorted(int(p) for _, pos in parts for p in pos)
        assert positions == list(range(table.num_rows))  # every row in exactly one shard
        for k, (part, pos) in enumerate(parts):
            assert list(pos) == sorted(pos) and part.column("row_id").to_pylist() == [f"m{p}" for p in pos]
            assert all(assignment(table, n)[p] == k for p in pos)
    no_ids = pa.table({"prompt": ["a", "b", "c"]})  # no row_id: the input position is the key
    assert list(assignment(no_ids, 2)) == [shard_of(str(i), 2) for i in range(3)]
    with pytest.raises(ValueError, match="not in 0..1"):
        shard_rows(table, 2, 2)


@pytest.mark.parametrize("use", ["rejection", "pass_rate"])
@pytest.mark.parametrize("shards", [1, 2, 3, 7])
def test_sharded_equals_unsharded(tmp_path: Path, verifier: Verifier, use: str, shards: int) -> None:
    table = rows()
    stats = GenerationStats()
    expected = _filter(use, _generate(table, tmp_path / "plain", stats, FakeEngine(responder=responder)),
                       verifier, table.schema, stats)
    assert expected.dropped and expected.kept > 0  # a real mix of kept and dropped
    parts, shard_stats = [], []
    for k in range(shards):
        part, positions = shard_rows(table, k, shards)
        s = GenerationStats()
        engine = FakeEngine(responder=responder)
        parts.append(records_table(_generate(part, tmp_path / "sharded", s, engine), positions))
        assert engine.requests == part.num_rows * len(MODES)  # each shard prompts only its rows
        shard_stats.append(s.__dict__)
    assert all(p.schema == RECORD_SCHEMA for p in parts)
    total = merged_stats(shard_stats)
    assert (total.generated, total.requests, total.rows_done) == (stats.generated, stats.requests, stats.rows_done)
    got = _filter(use, merged_records(table, [p.to_batches(max_chunksize=5) for p in parts], batch_rows=5),
                  verifier, table.schema, total)
    assert got.table.equals(expected.table) and content_hash(got.table) == content_hash(expected.table)
    assert (got.dropped, got.items_in, got.kept) == (expected.dropped, expected.items_in, expected.kept)
    assert got.items_in == got.kept + sum(got.dropped.values())  # row accounting


def test_merge_refuses_shards_that_do_not_match_the_input(tmp_path: Path) -> None:
    table = rows(9)
    parts = []
    for k in range(2):
        part, positions = shard_rows(table, k, 2)
        parts.append(records_table(_generate(part, tmp_path, GenerationStats(), FakeEngine()), positions))
    with pytest.raises(ValueError, match="do not match the input"):
        list(merged_records(table, parts[::-1]))  # shards swapped
    with pytest.raises(ValueError, match="do not match the input"):
        list(merged_records(table, [*parts, parts[0].slice(0, 0)]))  # read as 3 shards
    with pytest.raises(ValueError, match="past the last input row"):
        list(merged_records(table.slice(0, 5), parts))  # fewer input rows than were generated
