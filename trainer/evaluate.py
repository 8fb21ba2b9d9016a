"""Held-out evaluation of one checkpoint on every domain's eval set, in /think and /no_think.

What: for each eval set (an RL_SCHEMA table + the domain's Reward) and each mode, every prompt is
rendered exactly as training renders it (curation.chat: default system prompt + user prompt +
" /think" | " /no_think"), completed greedily in batches, and scored by the Reward. The result per
(domain, mode) is the mean score, its standard error, the number of scored rows and a histogram of
the reward's reasons (wrong_answer, no_boxed_answer, timeout, ...).

Why greedy: the forgetting gate compares checkpoints, so the only thing allowed to move a score is
the weights; sampling noise would make a small eval set block (or pass) at random.
Why the standard error: the no-forgetting check tolerates max(2 points, 2 stderr) so small eval
sets do not block on noise; stderr = population std / sqrt(n).
Rows whose reward is None ("not applicable") are counted under their reason but excluded from the
mean and from n.
Scores go through the reward cache (rewards.cache), the same file as training by default
(`$CASCADE_HOME/reward_cache.sqlite`): re-evaluating a checkpoint, or another checkpoint that
answers a row identically, does not re-run the verifier. Batch-dependent rewards pass through.

Dagster-free; torch/transformers are imported only when a checkpoint is actually evaluated.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from rewards.base import Reward, RewardResult

MODES = ("think", "no_think")
# The rollout engines sample; at this temperature the softmax is one-hot in fp32, so sampling is
# argmax decoding (exact ties aside, and those are resolved by the fixed seed).
GREEDY_TEMPERATURE = 1e-6
# Reward columns passed to verifiers (everything in RL_SCHEMA except the prompt itself).
REWARD_COLUMNS = ("answer", "tests", "instruction_id_list", "kwargs", "golden_patch", "code_context")


@dataclass(frozen=True)
class EvalSet:
    """One held-out set: rows in curation.schemas.RL_SCHEMA columns plus the reward that scores them."""

    table: pa.Table
    """Rows with at least `prompt`; the reward's columns (answer, tests, ...) where it needs them."""
    reward: Reward
    """Scores completions; its reasons are aggregated into the result."""
    modes: tuple[str, ...] | None = None
    """Modes for this set only (e.g. `("no_think",)`); None uses evaluate_checkpoint's `modes`."""


@dataclass
class EvalScore:
    """Aggregated score of one (domain, mode)."""

    scores: list[float] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)

    def add(self, result: RewardResult) -> None:
        self.reasons[result.reason] += 1
        if result.score is not None:
            self.scores.append(float(result.score))

    def as_dict(self) -> dict[str, Any]:
        n = len(self.scores)
        mean = sum(self.scores) / n if n else 0.0
        var = sum((s - mean) ** 2 for s in self.scores) / n if n else 0.0
        return {"score": mean, "stderr": math.sqrt(var / n) if n else 0.0, "n": n, "reasons": dict(self.reasons)}


def eval_set_from_parquet(path: str | os.PathLike, domain: str, limit: int | None = None,
                          **reward_options: Any) -> EvalSet:
    """Read an eval table and attach the reward that scores `domain` (its stage kind's eval reward;
    `rm` needs model_path)."""
    import pyarrow.parquet as pq

    from rewards.registry import get_reward
    from spec.kinds import kind_for_eval_domain

    table = pq.read_table(path)
    if limit is not None:
        table = table.slice(0, limit)
    return EvalSet(table, get_reward(kind_for_eval_domain(domain).eval_reward, **reward_options))


def render_prompts(prompts: Sequence[str], mode: str) -> list[str]:
    """ChatML generation prompts, rendered exactly as the trainer renders them."""
    from curation.chat import render_prompt

    return [render_prompt(p, mode) for p in prompts]


def score_completions(eval_set: EvalSet, completions: Sequence[str],
                      reward_cache: str | os.PathLike | None = None) -> dict[str, Any]:
    """Score one mode's completions (aligned with the table rows) and aggregate them.

    `reward_cache` as GRPOConfig.reward_cache: None = the shared default file, "off" = no cache.
    """
    from rewards.cache import cache_path, maybe_cached

    table = eval_set.table
    columns = {c: table.column(c).to_pylist() for c in REWARD_COLUMNS if c in table.column_names}
    reward = maybe_cached(eval_set.reward, cache_path(reward_cache))
    agg = EvalScore()
    for result in reward.score(table.column("prompt").to_pylist(), list(completions), **columns):
        agg.add(result)
    return agg.as_dict()


def evaluate_checkpoint(
    checkpoint_dir: str | os.PathLike,
    eval_sets: dict[str, EvalSet],
    modes: Sequence[str] = MODES,
    max_new_tokens: int = 256,
    batch_size: int = 16,
    seed: int = 0,
    rollout_engine: str = "hf",
    vllm_options: dict[str, Any] | None = None,
    reward_cache: str | os.PathLike | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Evaluate `checkpoint_dir` on every set in every mode -> {domain: {mode: {score, stderr, n, reasons}}}.

    `rollout_engine` is "hf" (CPU/GPU) or "vllm" (GPU, [gpu] extra); `seed` resolves exact logit ties.
    `reward_cache`: None = `$CASCADE_HOME/reward_cache.sqlite` (shared with training), "off" = none.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.rollout import HFRolloutEngine

    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir)
    if rollout_engine == "vllm":
        from trainer.rollout_vllm import VLLMRolloutEngine

        engine = VLLMRolloutEngine(checkpoint_dir, tokenizer, vllm_options, seed=seed)
    elif rollout_engine == "hf":
        model = AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32)
        engine = HFRolloutEngine(model, tokenizer, batch_size=batch_size)
    else:
        raise ValueError(f"rollout_engine must be 'hf' or 'vllm', got {rollout_engine!r}")
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for domain, eval_set in eval_sets.items():
        results[domain] = {}
        prompts = eval_set.table.column("prompt").to_pylist()
        for mode in eval_set.modes or modes:
            texts = render_prompts(prompts, mode)
            completions = generate_greedy(engine, tokenizer, texts, max_new_tokens, seed)
            results[domain][mode] = score_completions(eval_set, completions, reward_cache)
    return results


def generate_greedy(engine: Any, tokenizer: Any, texts: Sequence[str], max_new_tokens: int,
                    seed: int = 0) -> list[str]:
    """One greedy completion per rendered prompt, through a trainer RolloutEngine."""
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    groups = engine.generate(ids, num_generations=1, max_new_tokens=max_new_tokens,
                             temperature=GREEDY_TEMPERATURE, seed=seed)
    return [group[0].text for group in groups]


def results_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A plain-text table of `evaluate_checkpoint`'s result (for logs and asset metadata)."""
    lines = [f"{'domain':<10} {'mode':<9} {'score':>7} {'stderr':>7} {'n':>5}  top reasons"]
    for domain, by_mode in results.items():
        for mode, r in by_mode.items():
            top = ", ".join(f"{k}={v}" for k, v in Counter(r["reasons"]).most_common(3))
            lines.append(f"{domain:<10} {mode:<9} {r['score']:>7.3f} {r['stderr']:>7.3f} {r['n']:>5}  {top}")
    return "\n".join(lines)
