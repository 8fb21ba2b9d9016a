"""Scoring rollouts with a stage's rewards: built once, behind the reward cache, fed the columns they read.

What: `load_rewards` takes a stage's rewards from their typed specs (rewards.registry.build_reward:
built from the options the recipe loader validated, the same instance the checkpoint asset's
version look-up built); `scorers` puts each behind the shared reward cache (rewards.cache;
batch-dependent rewards pass through it); `score_results` runs one reward on a batch with the
columns its registry entry declares (rewards.registry.reward_columns; a plug-in gets them all)
and returns a RewardResult per completion plus the number of failed scorings; `score_reward` is
its float view (the TRL plug's reward calls).

Why results and not floats: the per-rollout audit table (trainer.rollout_audit) records *why* each
rollout scored what it did.

Failure is not handled here: `Reward.score` contains it in one place (rewards.base.contain: a
raise, a wrong count, a score that is not a finite number or a call past `timeout_s` is a zero
score flagged infra_error with its reason, never a crash or a hung stage); this module counts them.
"""

from __future__ import annotations

from typing import Any

from rewards.base import Reward, RewardResult


def load_rewards(specs: list[Any]) -> tuple[list[Reward], list[float], list[dict[str, Any]]]:
    """(reward objects, weights, lineage records) of a stage's typed reward specs.

    Names resolve through rewards.registry (built-ins, or `module:attr` plug-ins); every record
    carries the reward's version (a digest of its source, plus what its options change) so lineage
    names the exact reward code that scored the stage.
    """
    from rewards.registry import build_reward, reward_version

    rewards = [build_reward(s, keep=False) for s in specs]  # this stage owns them from here
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


def score_results(reward: Reward, prompts: list[str], completions: list[str], columns: dict[str, list],
                  timeout_s: float | None = None) -> tuple[list[RewardResult], int]:
    """One RewardResult per completion, scored with the columns `reward` reads, plus the count of
    failed scorings (results flagged infra_error); `timeout_s` bounds the call (rewards.base.contain)."""
    from rewards.registry import reward_columns

    reads = reward_columns(reward.name)
    if reads is not None:
        columns = {k: v for k, v in columns.items() if k in reads}
    results = reward.score(prompts, completions, timeout_s=timeout_s, **columns)
    return results, sum(1 for r in results if r.infra_error)


def score_reward(reward: Reward, prompts: list[str], completions: list[str], columns: dict[str, list],
                 timeout_s: float | None = None) -> tuple[list[float | None], int]:
    """`score_results` as numbers: (one score or None per completion, count of failed scorings)."""
    results, failures = score_results(reward, prompts, completions, columns, timeout_s)
    return [r.score for r in results], failures
