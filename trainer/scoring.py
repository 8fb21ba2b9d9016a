"""Scoring rollouts with a stage's rewards: build them, put the reward cache in front, never crash.

What: `load_rewards` builds a stage's rewards from their typed specs; `scorers` puts each behind
the shared reward cache (rewards.cache; batch-dependent rewards pass through it); `score_results`
runs one reward on a batch and returns a RewardResult per completion (score, reason, infra flag)
plus the number of failed scorings; `score_reward` is its float view (the TRL plug's reward calls).

Why results and not floats: the per-rollout audit table (trainer.rollout_audit) records *why* each
rollout scored what it did, so `Reward.score()` is preferred to the TRL-style `__call__`. A plain
function reward (no `score`) still works: its numbers are recorded with reason "scored".

Contract: a reward that raises, returns the wrong count or outlives `timeout_s` gives zeros flagged
as infra errors (`reward_error`, `reward_timeout`), never a crash or a hung stage.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

from rewards.base import RewardResult

FAILED_REASONS = ("timeout", "reward_error", "reward_timeout")
"""Reasons counted as failed scorings (besides any result flagged infra_error)."""


def load_rewards(specs: list[Any]) -> tuple[list[Any], list[float], list[dict[str, Any]]]:
    """(reward objects, weights, lineage records) of a stage's typed reward specs.

    Names resolve through rewards.registry (built-ins, or `module:attr` plug-ins); every record
    carries the reward's version (a digest of its source, plus what its options change) so lineage names the
    exact reward code that scored the stage.
    """
    from rewards.registry import get_reward, reward_version

    rewards = [get_reward(s.name, **s.options) for s in specs]
    records = [{"name": s.name, "version": reward_version(r), "weight": s.weight, "options": dict(s.options)}
               for s, r in zip(specs, rewards)]
    return rewards, [s.weight for s in specs], records


def scorers(rewards: list[Any], cache_setting: str | None) -> list[Any]:
    """Each reward behind the reward cache that `cache_setting` names (GRPOConfig.reward_cache)."""
    from rewards.cache import cache_path, maybe_cached

    path = cache_path(cache_setting)
    return [maybe_cached(r, path) for r in rewards]


def cache_counts(scorer: Any) -> tuple[int, int]:
    """(hits, misses) a cached scorer has counted so far; (0, 0) for an uncached one."""
    return int(getattr(scorer, "hits", 0)), int(getattr(scorer, "misses", 0))


def reward_name(reward: Any) -> str:
    """A reward's name for logs: its `name`, a function's `__name__`, else its type."""
    return str(getattr(reward, "name", None) or getattr(reward, "__name__", None) or type(reward).__name__)


def _failed(n: int, reason: str, detail: str) -> list[RewardResult]:
    return [RewardResult(0.0, reason, True, detail) for _ in range(n)]


def _finite(result: Any) -> RewardResult:
    score = result.score
    ok = score is not None and math.isfinite(float(score))
    return RewardResult(float(score) if ok else None, str(getattr(result, "reason", "scored")),
                        bool(getattr(result, "infra_error", False)), getattr(result, "detail", None))


def _score_now(reward: Any, prompts: list[str], completions: list[str],
               columns: dict[str, list]) -> tuple[list[RewardResult], int]:
    try:
        if hasattr(reward, "score"):
            results = list(reward.score(prompts, completions, **columns))
        else:  # a plain TRL-style function: numbers only, no reasons
            results = [RewardResult(s, "scored") for s in reward(prompts, completions, **columns)]
        if len(results) != len(completions):
            raise RuntimeError(f"{len(results)} scores for {len(completions)} completions")
        results = [_finite(r) for r in results]
        return results, sum(1 for r in results if r.infra_error or r.reason in FAILED_REASONS)
    except Exception as err:  # noqa: BLE001 - contract: a reward never stops the stage
        print(f"[grpo] reward {reward_name(reward)} failed: {type(err).__name__}: {err}", file=sys.stderr)
        return _failed(len(completions), "reward_error", f"{type(err).__name__}: {err}"), len(completions)


def score_results(reward: Any, prompts: list[str], completions: list[str], columns: dict[str, list],
                  timeout_s: float | None = None) -> tuple[list[RewardResult], int]:
    """One RewardResult per completion plus the count of failed scorings; a reward that raises or
    outlives `timeout_s` gives zero scores flagged infra_error, never a crash or a hung stage.

    The call runs in a daemon thread when there is a timeout: a Python thread cannot be killed,
    so a hung reward is abandoned (it cannot block the exit either). Built-in verifiers enforce
    their own per-completion limits in killable processes; this bounds plug-in rewards.
    """
    if timeout_s is None:
        return _score_now(reward, prompts, completions, columns)
    box: list[tuple[list[RewardResult], int]] = []
    worker = threading.Thread(target=lambda: box.append(_score_now(reward, prompts, completions, columns)),
                              name=f"reward-{reward_name(reward)}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if box:
        return box[0]
    print(f"[grpo] reward {reward_name(reward)} timed out after {timeout_s:g} s on {len(completions)} "
          "completions: scored 0 and counted as failures", file=sys.stderr)
    return _failed(len(completions), "reward_timeout", f"no result within {timeout_s:g} s"), len(completions)


def score_reward(reward: Any, prompts: list[str], completions: list[str], columns: dict[str, list],
                 timeout_s: float | None = None) -> tuple[list[float | None], int]:
    """`score_results` as numbers: (one score or None per completion, count of failed scorings)."""
    results, failures = score_results(reward, prompts, completions, columns, timeout_s)
    return [r.score for r in results], failures
