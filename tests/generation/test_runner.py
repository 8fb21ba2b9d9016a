"""generation.runner: the one run (engine + generation cache) the generation assets and `cascade
generate` share. A recipe entry becomes the job the assets ran before (engine options, openai
endpoints, sampling); a run streams every record, closes its engine, and keys the cache exactly
as generation.pipeline.generate_rows does, so a rerun, or the bare loop, finds every sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from generation.cache import GenerationCache
from generation.engine import ENGINES, Sampling
from generation.pipeline import generate_rows
from generation.runner import GenerationJob, run_generation, served_version
from spec.generation import GenerationSpec

ROWS = [{"row_id": f"r{i}", "prompt": f"What is {i} + {i}?"} for i in range(3)]


def _spec(**fields) -> GenerationSpec:
    return GenerationSpec(**{"name": "teach", "input": "math_sft", "use": "rejection", "model": "tiny",
                             "verify": {"name": "math"}, **fields})


def test_a_recipe_entry_becomes_its_job() -> None:
    gen = _spec(samples=3, modes=["think"], batch_rows=5, engine={"name": "hf", "options": {"dtype": "float32"}},
                sampling={"max_new_tokens": 9, "temperature": 0.5, "top_p": 0.9, "seed": 4})
    job = GenerationJob.from_spec(gen, "/models/teacher", "v1")
    assert job == GenerationJob("hf", "/models/teacher", "v1", ("think",), 3,
                                Sampling(max_new_tokens=9, temperature=0.5, top_p=0.9, seed=4), 5, {"dtype": "float32"})


def test_an_endpoint_is_asked_for_the_recipes_model_name() -> None:
    gen = _spec(model="sft_stage1", engine={"name": "openai", "base_urls": ["http://a/v1", "http://b/v1"],
                                            "api_key_env": "MY_KEY", "options": {"concurrency": 4}})
    job = GenerationJob.from_spec(gen, "/home/checkpoints/sft_stage1/v9", "v9")
    assert job.model == "sft_stage1" and job.model_version == "v9"
    assert job.engine_options == {"concurrency": 4, "api_key_env": "MY_KEY", "base_urls": ["http://a/v1", "http://b/v1"]}
    assert served_version("m") == "served:m"


def test_a_run_streams_closes_its_engine_and_shares_the_caches_keys(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    import fake_engine

    monkeypatch.setitem(ENGINES, "fake", "fake_engine:FakeEngine")
    closed: list[object] = []
    monkeypatch.setattr(fake_engine.FakeEngine, "close", lambda self: closed.append(self))
    job = GenerationJob("fake", "some-model", "v1", ("think", "no_think"), 2, Sampling(max_new_tokens=64), 2)
    with run_generation(job, ROWS, tmp_path / "cache") as run:
        records = list(run.records)
        engine = run.engine
    assert closed == [engine] and engine.model == "some-model" and engine.calls == 2  # 3 rows in batches of 2
    assert [(r.row_id, r.mode, r.sample) for r in records[:4]] == [
        ("r0", "think", 0), ("r0", "think", 1), ("r0", "no_think", 0), ("r0", "no_think", 1)]
    assert run.stats.generated == 12 and run.stats.cached == 0 and run.stats.rows_done == 3

    with run_generation(job, ROWS, tmp_path / "cache") as again:
        assert [r.response for r in again.records] == [r.response for r in records]
    assert again.stats.generated == 0 and again.stats.cached == 12 and again.engine.calls == 0

    bare = fake_engine.FakeEngine("some-model")
    with GenerationCache(tmp_path / "cache") as cache:
        direct = list(generate_rows(bare, "v1", ROWS, ("think", "no_think"), 2, Sampling(max_new_tokens=64), cache))
    assert bare.calls == 0 and [r.response for r in direct] == [r.response for r in records]


def test_the_engine_is_closed_when_the_reader_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import fake_engine

    monkeypatch.setitem(ENGINES, "fake", "fake_engine:FakeEngine")
    closed: list[object] = []
    monkeypatch.setattr(fake_engine.FakeEngine, "close", lambda self: closed.append(self))
    job = GenerationJob("fake", "some-model", "v1", ("think",), 1, Sampling())
    with pytest.raises(RuntimeError, match="reader failed"):
        with run_generation(job, ROWS, tmp_path / "cache") as run:
            next(run.records)
            raise RuntimeError("reader failed")
    assert len(closed) == 1
