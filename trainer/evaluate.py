"""Held-out evaluation of one checkpoint on every domain's eval set, in /think and /no_think.

What: for each eval set (an RL_SCHEMA table + the domain's Reward) and each mode, every prompt is
rendered exactly as training renders it (curation.chat: default system prompt + user prompt +
" /think" | " /no_think"), completed greedily in batches, and scored by the Reward. The result per
(domain, mode) is the mean score, its standard error, the number of scored rows and a histogram of
the reward's reasons (wrong_answer, no_boxed_answer, timeout, ...).

Completions come from the generation engine interface (generation.engine; `hf` by default, on
several CPU processes with `workers`: generation.hf_workers), greedy (temperature 0), the rows of
every set and mode in one call, so the engine fills each batch with prompts of similar length.
Why greedy: the forgetting gate compares checkpoints, so the only thing allowed to move a score is
the weights; sampling noise would make a small eval set block (or pass) at random.
Each cell carries a 95% interval (trainer.stats: Wilson for pass rates, bootstrap for continuous
scores such as the reward model's) and the per-row scores keyed by row id, so the gates
(trainer.gates) compare two checkpoints on the same rows with a paired test; stderr = population
std / sqrt(n) stays for reports without rows.
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
# The trainer's rollout engines sample; at this temperature the softmax is one-hot in fp32, so
# sampling is argmax decoding (the generation engines take temperature 0 instead).
GREEDY_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class EvalSet:
    """One held-out set: rows in curation.schemas.RL_SCHEMA columns plus the reward that scores them."""

    table: pa.Table
    """Rows with at least `prompt`; the reward's columns (answer, tests, ...) where it needs them."""
    reward: Reward
    """Scores completions; its reasons are aggregated into the result."""
    modes: tuple[str, ...] | None = None
    """Modes for this set only (e.g. `("no_think",)`); None uses evaluate_checkpoint's `modes`."""
    tts: Any = None
    """A trainer.tts.TTSPlan: also sample k per row and report best@k / select@k; None = greedy only."""
    tts_modes: tuple[str, ...] | None = None
    """Modes the TTS plan runs in; None = every mode the set is evaluated in."""
    max_new_tokens: int | None = None
    """Generation budget of this set's answers; None = evaluate_checkpoint's `max_new_tokens`."""


@dataclass
class EvalScore:
    """Aggregated score of one (domain, mode)."""

    scores: list[float] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)

    row_scores: dict[str, float | None] = field(default_factory=dict)

    def add(self, result: RewardResult, row_id: str | None = None) -> None:
        self.reasons[result.reason] += 1
        score = None if result.score is None else float(result.score)
        if score is not None:
            self.scores.append(score)
        if row_id is not None:
            self.row_scores[row_id] = score

    def as_dict(self) -> dict[str, Any]:
        """score, stderr, 95% interval (lo, hi; Wilson for pass rates, bootstrap otherwise), n,
        reasons and the per-row raw scores (`rows`, None = not applicable) the paired gates use."""
        from trainer.stats import cell

        n = len(self.scores)
        mean = sum(self.scores) / n if n else 0.0
        var = sum((s - mean) ** 2 for s in self.scores) / n if n else 0.0
        ci = cell(self.scores)
        return {"score": mean, "stderr": math.sqrt(var / n) if n else 0.0, "lo": ci.lo, "hi": ci.hi,
                "interval": ci.method, "n": n, "reasons": dict(self.reasons), "rows": dict(self.row_scores)}


def render_prompts(prompts: Sequence[str], mode: str, tools: Sequence[Any] | None = None) -> list[str]:
    """ChatML generation prompts, rendered exactly as the trainer renders them (a row's `tools`,
    when it has them, go into the system turn as in training, so tool-call evals see their tools)."""
    from curation.chat import render_prompt

    return [render_prompt(p, mode, tools=t) for p, t in zip(prompts, tools or [None] * len(prompts), strict=True)]


def row_ids(table: pa.Table) -> list[str]:
    """Each row's id (the `row_id` column; positions where it is missing or not unique): paired tests align on it."""
    ids = (table.column("row_id").to_pylist() if "row_id" in table.column_names else None) or range(table.num_rows)
    ids = [str(i) if rid is None else str(rid) for i, rid in enumerate(ids)]
    return ids if len(set(ids)) == len(ids) else [str(i) for i in range(len(ids))]


def reward_columns(table: pa.Table) -> dict[str, list]:
    """Every column but the prompt: `Reward.score` keeps the ones its reward reads (rewards.registry)."""
    return {c: table.column(c).to_pylist() for c in table.column_names if c != "prompt"}


def score_completions(eval_set: EvalSet, completions: Sequence[str],
                      reward_cache: str | os.PathLike | None = None, reward: Any = None) -> dict[str, Any]:
    """Score one mode's completions (aligned with the table rows) and aggregate them.

    `reward_cache` as GRPOConfig.reward_cache: None = the shared default file, "off" = no cache.
    `reward`: the set's reward already wrapped in its cache (evaluate_checkpoint builds it once per set).
    """
    from rewards.cache import cache_path, maybe_cached

    table = eval_set.table
    if reward is None:
        reward = maybe_cached(eval_set.reward, cache_path(reward_cache))
    agg = EvalScore()
    ids = row_ids(table)
    columns = reward_columns(table)
    for rid, result in zip(ids, reward.score(table.column("prompt").to_pylist(), list(completions), **columns)):
        agg.add(result, rid)
    return agg.as_dict()


def evaluate_checkpoint(
    checkpoint_dir: str | os.PathLike,
    eval_sets: dict[str, EvalSet],
    modes: Sequence[str] = MODES,
    max_new_tokens: int = 256,
    batch_size: int = 16,
    seed: int = 0,
    engine: str = "hf",
    engine_options: dict[str, Any] | None = None,
    reward_cache: str | os.PathLike | None = None,
    dtype: str = "float32",
    workers: int | str = 1,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Evaluate `checkpoint_dir` on every set in every mode -> {domain: {mode: cell}} (EvalScore.as_dict).

    Completions come from a generation engine (generation.engine: `hf` by default, `vllm` on a
    GPU, `openai` for a served model), greedy, the prompts of every set and mode in one call per
    generation budget (`max_new_tokens`, or a set's own `EvalSet.max_new_tokens`).
    A set with a TTS plan also gets `cell["tts"]` (trainer.tts.run_tts: best@k and select@k), run
    through the plan, so the TTS code is part of what evaluates a set only when it has one.
    `dtype` of the hf engine: `auto` = bfloat16 where the hardware computes it natively, else float32.
    `reward_cache`: None = `$CASCADE_HOME/reward_cache.sqlite` (shared with training), "off" = none.
    `workers`: CPU processes of the `hf` engine (generation.hf_workers; `auto`: one per core); 1 = this process.
    """
    from generation.engine import build_engine
    from rewards.cache import cache_path, maybe_cached

    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    options = dict(engine_options or {})
    if engine == "hf":
        options = {"dtype": eval_dtype(dtype), "batch_size": batch_size} | options
    gen = build_engine(engine, str(checkpoint_dir), **options, **({"workers": workers} if engine == "hf" else {}))
    results: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        # Every (set, mode) of one budget greedy in one call: the engine sorts all rows by length into full batches.
        cells = [(domain, mode) for domain, eval_set in eval_sets.items() for mode in eval_set.modes or modes]
        budget = {d: eval_set.max_new_tokens or max_new_tokens for d, eval_set in eval_sets.items()}
        inputs = {d: _prompts_and_tools(eval_set) for d, eval_set in eval_sets.items()}
        rewards = {d: maybe_cached(eval_set.reward, cache_path(reward_cache)) for d, eval_set in eval_sets.items()}
        texts = {(d, mode): render_prompts(inputs[d][0], mode, inputs[d][1]) for d, mode in cells}
        completions: dict[tuple[str, str], list[str]] = {}
        for tokens in sorted(set(budget.values())):
            group = [cell for cell in cells if budget[cell[0]] == tokens]
            flat = complete_greedy(gen, [t for cell in group for t in texts[cell]], tokens, seed)
            for cell in group:
                completions[cell], flat = flat[:len(texts[cell])], flat[len(texts[cell]):]
        for domain, mode in cells:
            eval_set, reward = eval_sets[domain], rewards[domain]
            cell = results.setdefault(domain, {})[mode] = score_completions(
                eval_set, completions[domain, mode], reward=reward)
            if eval_set.tts is not None and mode in (eval_set.tts_modes or (mode,)):
                cell["tts"] = eval_set.tts.run(  # trainer.tts, through the plan
                    gen, inputs[domain][0], texts[domain, mode], reward_columns(eval_set.table), reward,
                    budget[domain], seed, row_ids(eval_set.table))
    finally:
        gen.close()
    return results


def _prompts_and_tools(eval_set: EvalSet) -> tuple[list[str], list[Any] | None]:
    table = eval_set.table
    tools = table.column("tools").to_pylist() if "tools" in table.column_names else None
    return table.column("prompt").to_pylist(), tools


def eval_dtype(name: str) -> str:
    """`auto` -> `bfloat16` where the device computes bf16 natively (AVX512-BF16/AMX CPUs, bf16 GPUs), else `float32`."""
    if name != "auto":
        return name
    import torch

    from trainer.backend_api import native_bf16

    return "bfloat16" if native_bf16("cuda" if torch.cuda.is_available() else "cpu") else "float32"


def complete_greedy(engine: Any, texts: Sequence[str], max_new_tokens: int, seed: int = 0) -> list[str]:
    """One greedy completion per rendered prompt, through a generation.engine.Engine; a prompt
    too long for the model's context gets an empty completion (scored as the reward sees it)."""
    from generation.engine import PromptTooLong, Request, Sampling

    sampling = Sampling(max_new_tokens=max_new_tokens, temperature=0.0, seed=seed)
    out = [""] * len(texts)
    todo = list(range(len(texts)))
    while todo:
        try:
            groups = engine.generate([Request(texts[i]) for i in todo], sampling)
        except PromptTooLong as err:
            todo = [i for k, i in enumerate(todo) if k not in set(err.indexes)]
            continue
        for i, group in zip(todo, groups):
            out[i] = group[0].text
        break
    return out


def results_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A plain-text table of `evaluate_checkpoint`'s result (for logs and asset metadata)."""
    lines = [f"{'domain':<10} {'mode':<9} {'score':>7} {'stderr':>7} {'n':>5}  top reasons"]
    for domain, by_mode in results.items():
        for mode, r in by_mode.items():
            top = ", ".join(f"{k}={v}" for k, v in Counter(r["reasons"]).most_common(3))
            lines.append(f"{domain:<10} {mode:<9} {r['score']:>7.3f} {r['stderr']:>7.3f} {r['n']:>5}  {top}")
    return "\n".join(lines)
