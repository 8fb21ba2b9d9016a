"""Test-time scaling: what each selector submits, best@k vs select@k, and real rewards behind them."""

from __future__ import annotations

import json

import pytest

from generation.engine import Sample
from rewards.base import Reward, RewardResult
from trainer.tts import TTSPlan, majority_key, run_tts, select_majority, visible_tests


class ScriptedEngine:
    """Returns the scripted k completions of each prompt (by prompt text) and records the sampling."""

    def __init__(self, script: dict[str, list[str]]):
        self.script, self.calls = script, []

    def generate(self, requests, sampling, samples=1):
        self.calls.append((sampling, samples))
        return [[Sample(i, j, text, [], "stop") for j, text in enumerate(self.script[r.text][:samples])]
                for i, r in enumerate(requests)]


class ExactAnswer(Reward):
    """1 when the completion is exactly the row's answer; also a stand-in reward model (longer is better)."""

    name = "exact_answer"

    def _score_batch(self, prompts, completions, columns):
        answers = columns.get("answer") or [None] * len(completions)
        if answers[0] is None:  # used as a ranker: length is the "reward model score"
            return [RewardResult(float(len(c)), "scored") for c in completions]
        return [RewardResult(1.0 if c == a else 0.0, "correct" if c == a else "wrong_answer")
                for c, a in zip(completions, answers)]


def test_majority_votes_on_the_final_boxed_answer() -> None:
    assert majority_key(r"<think>maybe \boxed{3}</think>so \boxed{ 4 }") == "4"
    assert majority_key("<think>never closed \\boxed{4}") is None  # an open think block has no answer
    samples = ["no box", r"\boxed{5}", r"x \boxed{4}", r"y \boxed{4}", r"\boxed{5}"]
    assert select_majority(samples) == 1  # 5 and 4 tie at two votes: the first seen (5) wins
    assert select_majority(["no box", r"\boxed{5}", r"\boxed{4}", r"\boxed{4}"]) == 2
    assert select_majority(["", "<think>open"]) == 0  # nothing to vote on: the first sample


def test_visible_tests_are_the_first_case_only() -> None:
    stdio = {"kind": "stdio", "cases": [{"input": "1", "output": "2"}, {"input": "2", "output": "3"}]}
    assert json.loads(visible_tests(json.dumps(stdio)))["cases"] == [{"input": "1", "output": "2"}]
    asserts = {"kind": "assert", "asserts": ["assert f(1) == 2", "assert f(2) == 3"], "entry_point": "f"}
    assert json.loads(visible_tests(asserts))["asserts"] == ["assert f(1) == 2"]
    assert visible_tests("not json") is None and visible_tests(json.dumps({"kind": "stdio", "cases": []})) is None


def test_best_and_select_at_k_with_majority() -> None:
    # Row a: the right answer is in the minority (best@k 1, majority submits a wrong one);
    # row b: the majority is right; row c: nothing right.
    script = {"a": ["7", "9", "9"], "b": ["4", "4", "5"], "c": ["0", "1", "2"]}
    engine = ScriptedEngine(script)
    plan = TTSPlan(k=3, select="majority", temperature=0.9, top_p=0.8)
    out = run_tts(engine, ["a", "b", "c"], ["a", "b", "c"], {"answer": ["7", "4", "3"]}, ExactAnswer(), plan,
                  max_new_tokens=8, seed=5, row_ids=["ra", "rb", "rc"])
    assert out["best_at_k"]["rows"] == {"ra": 1.0, "rb": 1.0, "rc": 0.0}
    assert out["select_at_k"]["rows"] == {"ra": 0.0, "rb": 1.0, "rc": 0.0}
    assert out["best_at_k"]["score"] == pytest.approx(2 / 3) and out["select_at_k"]["score"] == pytest.approx(1 / 3)
    assert out["best_at_k"]["interval"] == "wilson" and out["best_at_k"]["lo"] < 2 / 3 < out["best_at_k"]["hi"]
    sampling, samples = engine.calls[0]
    assert samples == 3 and sampling.temperature == 0.9 and sampling.top_p == 0.8 and sampling.seed == 5


def test_rm_selector_submits_the_highest_ranked_sample_and_limit_caps_rows() -> None:
    script = {"a": ["7", "77", "777"], "b": ["4", "44", "444"]}
    plan = TTSPlan(k=3, select="rm", selector=ExactAnswer(), limit=1)
    out = run_tts(ScriptedEngine(script), ["a", "b"], ["a", "b"], {"answer": ["777", "4"]}, ExactAnswer(), plan, 8)
    assert out["rows_sampled"] == 1 and out["select_at_k"]["rows"] == {"0": 1.0}  # the longest = "best" by the ranker


def test_verifier_submits_the_first_sample_passing_the_visible_test(tmp_path) -> None:
    """Real code reward and sandbox: sample 0 fails the visible test, sample 1 passes it but fails a
    hidden one, sample 2 passes all. The verifier submits sample 1 (it cannot see the hidden test):
    select@k 0, best@k 1."""
    from rewards.registry import get_reward

    tests = json.dumps({"kind": "assert", "entry_point": "double",
                        "asserts": ["assert double(2) == 4", "assert double(-3) == -6"]})
    wrong = "```python\ndef double(x):\n    return x + 1\n```"
    visible_only = "```python\ndef double(x):\n    return abs(x) * 2\n```"
    right = "```python\ndef double(x):\n    return x * 2\n```"
    plan = TTSPlan(k=3, select="verifier")
    out = run_tts(ScriptedEngine({"p": [wrong, visible_only, right]}), ["p"], ["p"], {"tests": [tests]},
                  get_reward("code"), plan, 64)
    assert out["best_at_k"]["rows"] == {"0": 1.0}
    assert out["select_at_k"]["rows"] == {"0": 0.0}


def test_unknown_selector_is_refused() -> None:
    with pytest.raises(ValueError, match="select must be one of"):
        run_tts(ScriptedEngine({"a": ["x"]}), ["a"], ["a"], {}, ExactAnswer(), TTSPlan(k=2, select="vibes"), 4)
