"""Thinking-mode IF-RL reward: R_IF + sigmoid(z_RM) when R_IF = 1 else 0, z within the group."""

from __future__ import annotations

import math
import statistics

import pytest

from rewards.ifeval import IFEvalRMReward

NO_COMMA = ["punctuation:no_comma"]


class FakeRM:
    """Scores a response by a number written in it; records every call."""

    def __init__(self, fail: Exception | None = None, out: list[float] | None = None) -> None:
        self.calls: list[tuple[list, list]] = []
        self.fail, self.out = fail, out

    def __call__(self, prompts, responses):
        self.calls.append((list(prompts), list(responses)))
        if self.fail:
            raise self.fail
        return self.out if self.out is not None else [float(r.split()[-1]) for r in responses]


def run(reward: IFEvalRMReward, prompts: list, completions: list[str]):
    n = len(completions)
    return reward.score(prompts, completions, instruction_id_list=[NO_COMMA] * n, kwargs=[[{}]] * n)


def expected(raw: list[float]) -> list[float]:
    mean, std = statistics.fmean(raw), statistics.pstdev(raw)
    return [1 + 1 / (1 + math.exp(-((x - mean) / std if std else 0.0))) for x in raw]


def test_formula_within_one_group() -> None:
    rm = FakeRM()
    completions = ["<think>a, b</think>score 1", "score 4", "score 2", "fails, score 9"]
    out = run(IFEvalRMReward(scorer=rm), ["p"] * 4, completions)
    want = expected([1, 4, 2, 9])
    assert [r.score for r in out[:3]] == pytest.approx(want[:3])
    assert (out[3].score, out[3].reason) == (0.0, "instruction_not_followed:punctuation:no_comma")
    assert all(r.reason == "correct" for r in out[:3])
    # The reward model sees the prompts and the text after </think>, for the whole group.
    assert rm.calls == [(["p"] * 4, ["score 1", "score 4", "score 2", "fails, score 9"])]


def test_groups_are_normalised_separately_and_conversations_group_too() -> None:
    rm = FakeRM()
    chat_a = [{"role": "user", "content": "a"}]
    chat_b = [{"role": "user", "content": "b"}]
    prompts = [chat_a, chat_b, chat_a, chat_b]
    out = run(IFEvalRMReward(scorer=rm), prompts, ["score 1", "score 100", "score 3", "score 300"])
    a, b = expected([1, 3]), expected([100, 300])
    assert [r.score for r in out] == pytest.approx([a[0], b[0], a[1], b[1]])
    assert len(rm.calls) == 2


def test_equal_rm_scores_give_sigmoid_zero() -> None:
    out = run(IFEvalRMReward(scorer=FakeRM()), ["p"] * 3, ["score 5", "score 5", "score 5"])
    assert [r.score for r in out] == [1.5, 1.5, 1.5]


def test_group_without_a_pass_skips_the_reward_model() -> None:
    rm = FakeRM()
    out = run(IFEvalRMReward(scorer=rm), ["p", "p"], ["a, 1", "b, 2"])
    assert [r.score for r in out] == [0.0, 0.0] and rm.calls == []


@pytest.mark.parametrize("rm", [FakeRM(fail=RuntimeError("cuda oom")), FakeRM(out=[1.0]),
                                FakeRM(out=[1.0, float("nan")])])
def test_reward_model_failure_is_an_infra_error_for_passers_only(rm: FakeRM) -> None:
    out = run(IFEvalRMReward(scorer=rm), ["p", "p"], ["score 1", "fails, 2"])
    assert (out[0].score, out[0].reason, out[0].infra_error) == (0.0, "reward_model_error", True)
    assert (out[1].score, out[1].infra_error) == (0.0, False)


def test_if_errors_pass_through() -> None:
    reward = IFEvalRMReward(scorer=FakeRM())
    out = reward.score(["p"], ["score 1"], instruction_id_list=[["no:such"]], kwargs=[[{}]])
    assert (out[0].reason, out[0].infra_error) == ("unknown_instruction", True)


def test_model_path_is_loaded_lazily_and_failures_are_reported() -> None:
    reward = IFEvalRMReward(model_path="/nonexistent/reward-model")  # nothing loaded yet
    assert "rm=/nonexistent/reward-model" in reward.version
    out = run(reward, ["p"], ["score 1"])
    assert (out[0].reason, out[0].infra_error) == ("reward_model_error", True)


def test_needs_a_scorer_or_a_path() -> None:
    with pytest.raises(ValueError):
        IFEvalRMReward()
    assert IFEvalRMReward(scorer=FakeRM(), mode="loose").version != IFEvalRMReward(scorer=FakeRM()).version


@pytest.mark.slow
def test_with_a_real_reward_model_from_model_path(tiny_model_dir, tmp_path) -> None:
    from rewards.reward_model import RMConfig, RewardModelScorer, train_reward_model

    pairs = [{"prompt": "Say hi.", "chosen": "Hi there.", "rejected": "no"}] * 4
    rm_dir = train_reward_model(tiny_model_dir, pairs, tmp_path / "rm", RMConfig(max_steps=1, max_length=64))
    prompts = ["Greet me without commas."] * 3
    completions = ["<think>short, please</think>Hello friend", "Hi there", "Hello, friend"]
    out = run(IFEvalRMReward(model_path=str(rm_dir)), prompts, completions)
    raw = RewardModelScorer(rm_dir)(prompts, ["Hello friend", "Hi there", "Hello, friend"])
    assert [r.score for r in out[:2]] == pytest.approx(expected(raw)[:2], abs=1e-5)
    assert out[2].score == 0.0 and not any(r.infra_error for r in out)
