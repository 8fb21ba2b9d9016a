"""Deterministic rewards for trainer tests (referenced as `tests.trainer.fake_rewards:Name`)."""

from __future__ import annotations

from rewards.base import Reward, RewardResult


class LengthReward(Reward):
    """Shorter completions score higher: a signal even a random tiny model can follow."""

    name = "fake_length"
    version = "1"

    def _score_one(self, prompt, completion, row):
        return RewardResult(1.0 / (1.0 + len(completion)), "ok")


class DigitReward(Reward):
    """1 when the completion contains the row's answer digits' first character, else 0."""

    name = "fake_digit"
    version = "1"

    def _score_one(self, prompt, completion, row):
        return RewardResult(float(str(row.get("answer", "x"))[:1] in completion), "ok")


class ExplodingReward(Reward):
    """Raises on every call: the stage must record failures and go on."""

    name = "fake_boom"
    version = "1"

    def _score_batch(self, prompts, completions, columns):
        raise RuntimeError("boom")


class ConstantReward(Reward):
    """Same score for everything: every group has zero variance."""

    name = "fake_const"
    version = "1"

    def _score_one(self, prompt, completion, row):
        return RewardResult(1.0, "ok")


class HangingReward(Reward):
    """Blocks far longer than any test's reward timeout: the stage must give up on it and go on."""

    name = "fake_hang"
    version = "1"

    def _score_one(self, prompt, completion, row):
        import time

        time.sleep(120)
        return RewardResult(1.0, "ok")
