"""Reward cache: hits, keys (completion, reward version, reference), infra errors not cached."""

from __future__ import annotations

from typing import Any

from rewards.base import Reward, RewardResult
from rewards.cache import cached


class CountingReward(Reward):
    """Scores len(completion) == int(answer); counts the completions it really scored."""

    name, version = "counting", "1"

    def __init__(self) -> None:
        self.calls = 0

    def _score_one(self, prompt: Any, completion: str, row: dict[str, Any]) -> RewardResult:
        self.calls += 1
        if completion == "crash":
            raise RuntimeError("verifier down")
        return RewardResult(float(len(completion) == int(row["answer"])), "checked", detail=prompt)


def test_hits_and_keys(tmp_path):
    inner = CountingReward()
    reward = cached(inner, tmp_path / "cache.sqlite")
    assert (reward.name, reward.version) == ("counting", "1")
    assert reward(["p", "p"], ["abc", "ab"], answer=["3", "3"]) == [1.0, 0.0]
    assert inner.calls == 2
    # same rows again, in another order and mixed with a new one: only the new one is scored
    res = reward.score(["p", "p", "p"], ["ab", "abcd", "abc"], answer=["3", "4", "3"])
    assert [r.score for r in res] == [0.0, 1.0, 1.0] and inner.calls == 3
    assert res[2].reason == "checked" and res[2].detail == "p"
    # a different reference or prompt is a different key
    reward(["p"], ["abc"], answer=["2"])
    reward(["q"], ["abc"], answer=["3"])
    assert inner.calls == 5
    # a new version of the reward misses; the file survives a new wrapper
    inner.version = "2"
    assert cached(inner, tmp_path / "cache.sqlite")(["p"], ["abc"], answer=["3"]) == [1.0]
    assert inner.calls == 6
    inner.version = "1"
    again = cached(inner, tmp_path / "cache.sqlite")
    again(["p"], ["abc"], answer=["3"])
    assert inner.calls == 6 and (again.hits, again.misses) == (1, 0)


def test_infra_errors_are_retried(tmp_path):
    inner = CountingReward()
    reward = cached(inner, tmp_path / "c.sqlite")
    for _ in range(2):
        [res] = reward.score([None], ["crash"], answer=["5"])
        assert res.infra_error and res.reason == "reward_error"
    assert inner.calls == 2


def test_batch_dependent_rewards_pass_through(tmp_path):
    inner = CountingReward()
    inner.batch_dependent = True
    reward = cached(inner, tmp_path / "c.sqlite")
    reward([None], ["abc"], answer=["3"])
    reward([None], ["abc"], answer=["3"])
    assert inner.calls == 2 and reward.hits == 0
