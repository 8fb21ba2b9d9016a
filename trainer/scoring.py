"""Scoring rollouts with a stage's rewards: built once, behind the reward cache, fed the columns they read.

What: `load_rewards` takes a stage's rewards from their typed specs (rewards.registry.build_reward:
built from the options the recipe loader validated, the same instance the checkpoint asset's
version look-up built); `scorers` puts each behind the shared reward cache (rewards.cache;
batch-dependent rewards pass through it). The GRPO step then calls each scorer's `Reward.score`
itself (a RewardResult per completion: the per-rollout audit table, trainer.rollout_audit, records
*why* each rollout scored what it did); `failed` counts the failed scorings; `score_reward` is the
float view the TRL plug's reward calls use.

Neither failure nor columns are handled here: `Reward.score` hands a reward the columns its
registry entry declares (`Reward.reads`, set by rewards.registry; a plug-in gets them all) and
contains failure in one place (rewards.base.contain: a raise, a wrong count, a score that is not a
finite number or a call past `timeout_s` is a zero score flagged infra_error with its reason,
never a crash or a hung stage).
"""

from __future__ import annotations

from typing import Any

from rewards.base import Reward, RewardResult


def load_rewards(specs: list[Any], reward_model: str | None = None) -> tuple[list[Reward], list[float], list[dict[str, Any]]]:
    """(reward objects, weights, lineage records) of a stage's typed reward specs; `reward_model`: the
    reward-model folder the rewards that need one score with (rewards.registry.build_reward).

    Names resolve through rewards.registry (built-ins, or `module:attr` plug-ins); every record
    carries the reward's version (a digest of its source, plus what its options change) so lineage
    names the exact reward code that scored the stage.
    """
    from rewards.registry import build_reward, reward_version

    rewards = [build_reward(s, keep=False, reward_model=reward_model) for s in specs]  # this stage owns them from here
    records = [{"name": s.name, "version": reward_version(r), "weight": s.weight, "options": dict(s.options)}
               for s, r in zip(specs, rewards)]
    return rewards, [s.weight for s in specs], records


def scorers(rewards: list[Reward], cache_setting: str | None) -> list[Reward]:
    """Each reward behind the reward cache that `cache_setting` names (GRPOConfig.reward_cache)."""
    from rewards.cache import cache_path, maybe_cached

    path = cache_path(cache_setting)
    return [maybe_cached(r, path) for r in rewards]


def cache_counts(scorer: Any) -> tuple[int, int]:
    """(hits, misses) a cached scorer has counted so far; (0, 0) for an uncached one."""
    return int(getattr(scorer, "hits", 0)), int(getattr(scorer, "misses", 0))


def failed(results: list[RewardResult]) -> int:
    """How many scorings failed (results flagged infra_error: contained by rewards.base.contain)."""
    return sum(1 for r in results if r.infra_error)


def score_reward(reward: Reward, prompts: list[str], completions: list[str], columns: dict[str, list],
                 timeout_s: float | None = None) -> tuple[list[float | None], int]:
    """A reward's scores as numbers (the TRL plug's reward calls): (one score or None per completion,
    count of failed scorings); `Reward.score` hands it the columns it reads and bounds it by `timeout_s`."""
    results = reward.score(prompts, completions, timeout_s=timeout_s, **columns)
    return [r.score for r in results], failed(results)
