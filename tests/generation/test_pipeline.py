"""Teacher sampling on a fake engine with known responses (and once on the real `hf` engine):
rejection sampling counts with the real math reward, the pass-rate band, SWE patch sampling,
re-filtering from the cache with zero generation, stable data versions, progress reports."""

from __future__ import annotations

import importlib.util
import io
import logging
import re
from pathlib import Path

import pyarrow as pa
import pytest
from fake_engine import FakeEngine

from curation.chat import sft_rows
from curation.schemas import DOMAIN_SCHEMAS, RL_SCHEMA
from curation.swe import SweSplitConfig, split_swe, swe_prompt
from generation.cache import GenerationCache
from generation.engine import Sampling
from generation.filters import PassRateBand, Verifier, pass_rate_filter, rejection_sample, swe_patch_sample
from generation.pipeline import GenerationStats, call_seed, default_render, generate_rows
from generation.progress import LogProgress, ProgressState, TqdmProgress

SAMPLING = Sampling(max_new_tokens=200, temperature=1.0, seed=7)
QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def _is_think(prompt: str) -> bool:
    return prompt.rstrip().endswith("/think<|im_end|>\n<|im_start|>assistant")


def math_responder(prompt: str, i: int, seed: int) -> str:
    """Sample i of a math prompt, per mode: what rejection sampling must make of it is in the comment."""
    a, b = map(int, QUESTION.search(prompt).groups())
    s = a + b
    if _is_think(prompt):
        return [f"<think>{a}+{b}</think>The answer is \\boxed{{{s}}}",  # kept
                f"<think>hmm</think>\\boxed{{{s + 1}}}",  # verifier_failed: wrong_answer
                "<think>" + "x" * 500,  # truncated
                f"no think block \\boxed{{{s}}}",  # bad_think_block
                f"<think>{s}</think>\\boxed{{{s}}}",  # over_quota (2nd correct)
                "<think>only reasoning</think>",  # no_final_answer
                f"<think>x</think>I believe it is {s}"][i]  # verifier_failed: no_boxed_answer
    return [f"\\boxed{{{s}}}", f"<think>x</think>\\boxed{{{s}}}", "y" * 500, f"\\boxed{{{s + 2}}}",
            f"So \\boxed{{{s}}}", "", f"The answer is {s}"][i]


def math_rows(n: int = 3) -> list[dict]:
    return [{"row_id": f"m{i}", "source": "teacher_math", "prompt": f"What is {i} + {10 * i}?", "answer": str(11 * i)}
            for i in range(n)]


@pytest.fixture(scope="module")
def math_verifier():
    verifier = Verifier.from_registry("math", threshold=1.0)
    yield verifier
    verifier.close()


def _rejection(cache: GenerationCache, verifier: Verifier | None, engine: FakeEngine | None = None, rows=None):
    engine = engine or FakeEngine(responder=math_responder)
    stats = GenerationStats()
    records = generate_rows(engine, "teacher-v1", rows or math_rows(), None, 7, SAMPLING, cache, stats=stats,
                            max_prompt_tokens=400, count_tokens=len)
    return rejection_sample(records, "math", verifier, max_per_prompt=1, stats=stats), engine


def test_rejection_sampling_counts_and_rows(tmp_path: Path, math_verifier: Verifier) -> None:
    rows = math_rows() + [{"row_id": "long", "source": "teacher_math", "prompt": "What is 1 + 1? " + "pad " * 200,
                           "answer": "2"}]
    with GenerationCache(tmp_path) as cache:
        result, engine = _rejection(cache, math_verifier, rows=rows)
    assert result.dropped == {"verifier_failed": 12, "over_quota": 6, "truncated": 6, "bad_think_block": 3,
                              "think_in_no_think": 3, "no_final_answer": 6, "prompt_too_long": 14}
    assert result.verifier_reasons == {"wrong_answer": 6, "no_boxed_answer": 6}
    assert result.items_in == 4 * 2 * 7 == result.kept + sum(result.dropped.values())
    assert result.kept == 6 and result.extra == {"rows_in": 4, "rows_without_kept": 1}
    assert engine.samples == 3 * 2 * 7  # the long prompt was never sent
    table = result.table
    assert table.schema == DOMAIN_SCHEMAS["math"]
    got = {r["row_id"]: r for r in table.to_pylist()}
    assert sorted(got) == sorted(f"m{i}-{m}-s0" for i in range(3) for m in ("think", "no_think"))
    assert got["m2-think-s0"]["think_response"] == "<think>2+20</think>The answer is \\boxed{22}"
    assert got["m2-think-s0"]["no_think_response"] is None and got["m2-no_think-s0"]["no_think_response"] == "\\boxed{22}"
    assert got["m1-think-s0"]["answer"] == "11" and got["m1-think-s0"]["source"] == "teacher_math"
    sft, dropped = sft_rows(table, "math")  # the output is an ordinary SFT source
    assert sft.num_rows == 6 and dropped == {}
    summary = result.summary()
    assert summary["generated"] == 42 and summary["cached"] == 0 and summary["tokens_generated"] > 0
    assert summary["data_version"] == result.data_version


def test_refilter_from_cache_generates_nothing_and_versions_are_stable(tmp_path: Path, math_verifier: Verifier) -> None:
    with GenerationCache(tmp_path / "a") as cache:
        first, _ = _rejection(cache, math_verifier)
        again, engine = _rejection(cache, math_verifier)
        assert engine.calls == 0 and again.stats.generated == 0 and again.stats.cached == 42
        assert again.data_version == first.data_version and again.dropped == first.dropped
        # Another verifier and threshold: same cached samples, zero generation, new filtering.
        lenient = Verifier(lambda prompts, completions, **cols: [0.5] * len(completions), "half", threshold=0.5)
        other, engine = _rejection(cache, lenient)
        assert engine.calls == 0
        assert "verifier_failed" not in other.dropped and other.dropped["over_quota"] == 6 + 12
        stricter, engine = _rejection(cache, Verifier(math_verifier.reward, "math", threshold=1.5))
        assert engine.calls == 0 and stricter.kept == 0 and stricter.dropped["verifier_failed"] == 12 + 6 + 6
    with GenerationCache(tmp_path / "b") as fresh:  # a new cache, same deterministic teacher
        assert _rejection(fresh, math_verifier)[0].data_version == first.data_version


def test_more_samples_later_generates_only_the_new_ones(tmp_path: Path) -> None:
    rows = [{"row_id": "r", "prompt": "What is 1 + 2?"}]
    with GenerationCache(tmp_path) as cache:
        two = list(generate_rows(FakeEngine(), "m", rows, ("think",), 2, SAMPLING, cache))
        engine = FakeEngine()
        four = list(generate_rows(engine, "m", rows, ("think",), 4, SAMPLING, cache))
    assert engine.samples == 2 and engine.seeds == [call_seed(SAMPLING.seed, 2)] != [SAMPLING.seed]
    assert [r.response for r in four[:2]] == [r.response for r in two] and [r.cached for r in four] == [1, 1, 0, 0]
    assert len({r.response for r in four}) == 4  # new draws, not a replay of samples 0..1


def test_engine_prompt_too_long_is_dropped_and_the_rest_generated(tmp_path: Path) -> None:
    rows = [{"prompt": "short"}, {"prompt": "long " * 100}, {"prompt": "short too"}]
    engine = FakeEngine(max_prompt_chars=200)
    records = list(generate_rows(engine, "m", rows, ("no_think",), 2, SAMPLING, None))
    assert [r.problem for r in records] == [None, None, "prompt_too_long", "prompt_too_long", None, None]
    assert engine.samples == 4 and records[2].response is None and records[0].row_id == "0"


def pass_rate_responder(prompt: str, i: int, seed: int) -> str:
    a, b = map(int, QUESTION.search(prompt).groups())
    return f"\\boxed{{{a + b if i < b else -1}}}"  # row b: b of 4 samples correct


def test_pass_rate_band(tmp_path: Path, math_verifier: Verifier) -> None:
    rows = [{"row_id": f"q{b}", "source": "s", "domain": "math", "mode": "no_think" if b % 2 else "think",
             "prompt": f"What is 1 + {b}?", "answer": str(1 + b)} for b in range(5)]
    table = pa.Table.from_pylist(rows, schema=RL_SCHEMA)

    def run(cache, band=PassRateBand()):
        engine, stats = FakeEngine(responder=pass_rate_responder), GenerationStats()
        records = generate_rows(engine, "ref", table, None, 4, SAMPLING, cache, stats=stats)
        return pass_rate_filter(records, math_verifier, band, schema=table.schema, stats=stats), engine

    with GenerationCache(tmp_path) as cache:
        result, engine = run(cache)
        assert engine.samples == 5 * 4  # one mode per row: the row's own
        assert result.table.column("row_id").to_pylist() == ["q1", "q2", "q3"]
        assert result.table.column("pass_rate").to_pylist() == [0.25, 0.5, 0.75]
        assert result.table.schema == RL_SCHEMA.append(pa.field("pass_rate", pa.float64()))
        assert result.dropped == {"pass_rate_zero": 1, "pass_rate_too_high": 1}
        assert result.items_in == 5 == result.kept + sum(result.dropped.values())
        narrow, engine = run(cache, PassRateBand(min_rate=0.5, max_rate=0.5))
        assert engine.calls == 0 and narrow.table.column("row_id").to_pylist() == ["q2"]
        assert narrow.dropped == {"pass_rate_zero": 1, "pass_rate_too_low": 1, "pass_rate_too_high": 2}
        keep_all, _ = run(cache, PassRateBand(drop_unsolved=False, drop_solved=False))
        assert keep_all.kept == 5


GOLDEN = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
CLOSE = GOLDEN.replace("a + b", "b + a")


def swe_responder(prompt: str, i: int, seed: int) -> str:
    easy = "ISSUE-EASY" in prompt
    good = [f"Here is the fix:\n```diff\n{GOLDEN}```", f"```diff\n{CLOSE}```", GOLDEN]
    bad = ["I cannot fix this.", "```diff\nnot a diff at all\n```"]
    return (good + bad)[i] if easy else ([good[0]] + bad + bad)[i]


def test_swe_patch_sampling_feeds_the_similarity_split(tmp_path: Path) -> None:
    rows = [{"row_id": name, "source": "swe_src", "repo": f"org/{name}", "base_commit": "abc", "issue": f"{name} add is wrong",
             "code_context": "def add(a, b):\n    return a - b\n", "golden_patch": GOLDEN, "candidate_patches": ["stale"]}
            for name in ("ISSUE-EASY", "ISSUE-HARD")]
    assert default_render(rows[0], "no_think").text.count(swe_prompt(rows[0]["issue"], rows[0]["code_context"])) == 1
    with GenerationCache(tmp_path) as cache:
        result = swe_patch_sample(generate_rows(FakeEngine(responder=swe_responder), "teacher", rows, ("no_think",), 5,
                                                SAMPLING, cache))
    assert result.items_in == 10 and result.kept == 4 and result.dropped == {"unparsable_patch": 6}
    assert result.table.schema == DOMAIN_SCHEMAS["swe"]
    easy, hard = result.table.to_pylist()
    assert easy["candidate_patches"] == [GOLDEN, CLOSE, GOLDEN] and hard["candidate_patches"] == [GOLDEN]
    split = split_swe(result.table, SweSplitConfig(samples=8, min_good_for_sft=2))
    assert split.sft.column("row_id").to_pylist() == ["ISSUE-EASY"]
    assert split.rl.column("row_id").to_pylist() == ["ISSUE-HARD"]


def test_progress_reports(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    states: list[tuple[int, int | None, int, int, bool]] = []

    def collect(s: ProgressState) -> None:
        states.append((s.rows_done, s.rows_total, s.generated, s.cached, s.final))

    rows = [{"prompt": f"q{i}"} for i in range(5)]
    with GenerationCache(tmp_path) as cache:
        list(generate_rows(FakeEngine(), "m", rows, ("think",), 2, SAMPLING, cache, progress=collect, batch_size=2))
        assert states == [(2, 5, 4, 0, False), (4, 5, 8, 0, False), (5, 5, 10, 0, False), (5, 5, 10, 0, True)]
        logger = logging.getLogger("test.generation")
        with caplog.at_level(logging.INFO, logger="test.generation"):
            list(generate_rows(FakeEngine(), "m", iter(rows), ("think",), 2, SAMPLING, cache,
                               progress=LogProgress(logger, every_s=3600)))
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2 and "rows 5, generated 0, cached 10 (100% hits)" in lines[-1]
        out = io.StringIO()
        list(generate_rows(FakeEngine(), "m", rows, ("think",), 2, SAMPLING, cache, progress=TqdmProgress(file=out)))
        assert "5/5" in out.getvalue()
    state = ProgressState(rows_done=5, rows_total=10, generated=4, tokens_generated=100, engine_seconds=2.0, elapsed_s=5.0)
    assert (state.tokens_per_s, state.eta_s) == (50.0, 5.0)


@pytest.mark.skipif(importlib.util.find_spec("generation.hf") is None, reason="generation.hf not available yet")
def test_real_hf_engine_on_the_tiny_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    from generation.hf import HFEngine

    engine = HFEngine(str(tiny_model_dir), batch_size=8)
    calls = []
    real = engine.generate
    engine.generate = lambda *a, **k: calls.append(1) or real(*a, **k)
    rows = [{"row_id": "a", "prompt": "What is 2 + 2?"}, {"row_id": "b", "prompt": "Name a color."}]
    sampling = Sampling(max_new_tokens=6, temperature=1.0, seed=3)
    try:
        with GenerationCache(tmp_path) as cache:
            first = list(generate_rows(engine, "tiny", rows, None, 2, sampling, cache))
            assert len(calls) == 1 and len(first) == 8 and all(r.tokens > 0 for r in first)
            assert all(r.finish_reason in ("stop", "length") for r in first)
            second = list(generate_rows(engine, "tiny", rows, None, 2, sampling, cache))
            assert len(calls) == 1 and all(r.cached for r in second)
            assert [r.response for r in second] == [r.response for r in first]
    finally:
        engine.close()
