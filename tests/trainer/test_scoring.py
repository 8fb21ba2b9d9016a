"""The reward path of a stage: options validated once, a reward built once, failure contained in one
place (rewards.base.contain), and the columns a reward reads taken from its registry entry."""

from __future__ import annotations

import pytest

from rewards import registry
from rewards.base import Reward, RewardResult, contain
from spec.train import RewardSpec
from trainer.scoring import failed, load_rewards, score_reward

FAKE = "tests.trainer.fake_rewards:"


class NaNReward(Reward):
    name, version = "nan", "1"

    def _score_batch(self, prompts, completions, columns):
        return [RewardResult(float("nan"), "scored"), RewardResult(None, "not_applicable"), 2]


class ColumnsSeen(Reward):
    """Records the column names it was handed."""

    version = "1"

    def __init__(self, name: str) -> None:
        self.name, self.seen = name, []

    def _score_batch(self, prompts, completions, columns):
        self.seen.append(sorted(columns))
        return [1.0] * len(completions)


def test_score_reward_never_raises():
    from tests.trainer.fake_rewards import ExplodingReward

    assert score_reward(ExplodingReward(), ["p"] * 3, ["a", "b", "c"], {}) == ([0.0] * 3, 3)
    assert score_reward(NaNReward(), ["p"] * 3, ["a"] * 3, {}) == ([0.0, None, 2.0], 1)


def test_score_results_keep_reasons():
    from tests.trainer.fake_rewards import DigitReward, ExplodingReward, HangingReward

    results = DigitReward().score(["p"] * 2, ["12", "x"], answer=["1", "1"])
    assert [(r.score, r.reason, r.infra_error) for r in results] == [(1.0, "ok", False), (0.0, "ok", False)]
    assert failed(results) == 0
    (boom,) = results = ExplodingReward().score(["p"], ["a"])
    assert (boom.score, boom.reason, boom.infra_error, failed(results)) == (0.0, "reward_error", True, 1)
    assert "boom" in boom.detail
    (hung,) = results = HangingReward().score(["p"], ["a"], timeout_s=0.1)
    assert (hung.reason, hung.infra_error, failed(results)) == ("reward_timeout", True, 1)


def test_contain_is_the_one_wrapper():
    assert [(r.score, r.reason, r.infra_error) for r in contain(lambda: [1.0], 2)] == [(0.0, "wrong_length", True)] * 2
    assert contain(lambda: "ab", 2)[0].reason == "wrong_length"  # a string is not one score per completion
    assert [(r.score, r.reason) for r in contain(lambda: [True, "x", float("-inf")], 3)] == [
        (1.0, "scored"), (0.0, "bad_score"), (0.0, "bad_score")]
    assert contain(lambda: (x for x in [1 / 0]), 1)[0].reason == "reward_error"  # a generator fails inside
    with pytest.raises(TypeError, match="not score"):
        type("Bypass", (Reward,), {"score": lambda self, *a, **k: []})


def test_a_row_that_raises_costs_only_its_row():
    class OddRows(Reward):
        name, version = "odd_rows", "1"

        def _score_one(self, prompt, completion, row):
            if completion == "bad":
                raise ValueError("no")
            return RewardResult(1.0, "ok")

    out = OddRows().score([None] * 3, ["a", "bad", "c"])
    assert [(r.score, r.reason) for r in out] == [(1.0, "ok"), (0.0, "reward_error"), (1.0, "ok")]


def test_a_reward_is_handed_the_columns_its_registry_entry_declares():
    assert registry.get_reward("mcqa").reads == ("answer", "domain")  # required + optional (REWARDS)
    assert registry.get_reward("swe").reads == registry.reward_columns("swe")
    columns = {"answer": ["1"], "domain": ["mcqa"], "row_id": ["r"], "json_schema": ["{}"], "tests": ["t"]}
    mcqa = ColumnsSeen("mcqa")
    mcqa.reads = registry.reward_columns("mcqa")
    mcqa.score(["p"], ["a"], **columns)
    assert mcqa.seen == [["answer", "domain"]]
    plugin = ColumnsSeen("my_pkg.rewards:thing")  # declares none: every column
    plugin.score(["p"], ["a"], **columns)
    assert plugin.seen == [sorted(columns)]


def test_trl_dataset_and_reward_carry_the_cascade2_columns():
    pytest.importorskip("trl")
    from types import SimpleNamespace

    from trainer.backends.trl_adapter import TRLReward, dataset_columns

    available = ["row_id", "source", "domain", "mode", "prompt", "answer", "json_schema", "tools", "reference_call"]
    cfg = SimpleNamespace(rewards=[RewardSpec(name="structured_output"), RewardSpec(name="tool_call")])
    assert dataset_columns(cfg, available) == ["domain", "mode", "json_schema", "tools", "reference_call"]
    plugin = SimpleNamespace(rewards=[RewardSpec(name=FAKE + "LengthReward")])
    assert dataset_columns(plugin, available) == [c for c in available if c != "prompt"]
    seen = ColumnsSeen("tool_call")
    seen.reads = registry.reward_columns("tool_call")  # as rewards.registry builds it
    TRLReward(seen)(prompts=["x"], completions=["y"], completion_ids=[[1]], trainer_state=None,
                    user_prompt=["q"], domain=["tool_call"], tools=["[]"], reference_call=["{}"], answer=["1"])
    assert seen.seen == [["domain", "reference_call", "tools"]]


def test_options_validated_once_and_reward_built_once(monkeypatch):
    spec = RewardSpec.model_validate({"name": "swe", "options": {"similarity": "lexical", "threshold": 1}},
                                     context={"reward_catalog": registry.CATALOG})
    assert spec.validated_options() == {"similarity": "lexical", "threshold": 1.0}  # typed by the option model
    assert spec.model_dump()["options"] == {"similarity": "lexical", "threshold": 1}  # hashed as written

    def no_second_check(*args, **kwargs):
        raise AssertionError("options validated again")

    monkeypatch.setattr(registry, "_validated", no_second_check)
    versions = registry.reward_versions([spec])  # the checkpoint asset's look-up builds it...
    (reward,), _, records = load_rewards([spec])  # ...and the stage takes that instance
    (again,), _, _ = load_rewards([spec])  # taken: a new stage run builds its own
    assert reward.threshold == 1.0 and records[0]["version"] == versions["swe"] == reward.version
    assert again is not reward
    # options changed after load (the asset adds a reward model's path): validated then, once
    changed = spec.model_copy(update={"options": {"similarity": "lexical"}})
    with pytest.raises(AssertionError, match="validated again"):
        load_rewards([changed])
    monkeypatch.undo()
    assert load_rewards([changed])[0][0].threshold is None
    unchecked = RewardSpec(name="swe", options={"similarity": "lexical"})  # a run config file: no catalog
    assert unchecked.validated_options() is None and load_rewards([unchecked])[0][0].threshold is None
