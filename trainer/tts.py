"""Test-time scaling in the evals: generate k, select one, submit it (the paper's generate–select–submit).

What: for an eval set with a `tts` plan, every row (up to `limit`) is sampled `k` times at the
plan's temperature through the same generation engine as the greedy eval; all k samples are
scored by the set's reward, and two numbers are reported beside greedy, each with a 95% interval:

  best_at_k    the best of the k scores per row (an oracle: what a perfect selector would submit)
  select_at_k  the score of the one sample the selector submits

Selectors (`select`):
  majority  the most frequent final answer (math: the last `\\boxed{}` after `</think>`, compared
            after whitespace squashing; other domains: the whole final text); ties go to the
            answer seen first; the first sample with that answer is submitted. A sample with no
            answer never wins a vote unless no sample has one.
  verifier  the row's *visible* tests (the first stdio case, or the first assert, of `tests`) are
            run on each sample in order; the first that passes is submitted, else the first
            sample. Only the full tests score it, so passing the visible test is not the score.
  rm        the sample with the highest reward-model score is submitted (the selector reward is
            the recipe's reward model; on the rm domain select@k equals best@k by construction).

Why both numbers: best@k bounds what selection can reach; the gap to select@k is the selector's
loss, and the gap from greedy to select@k is what test-time compute buys.
Sampling is seeded (engine-level seed + sample index), so a re-evaluation is identical.
Dagster-free; the engine and rewards come from the caller.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewards.base import Reward

SELECTORS = ("majority", "verifier", "rm")


@dataclass(frozen=True)
class TTSPlan:
    """How one eval set is sampled and selected (from the recipe's `tts:` of a benchmark)."""

    k: int
    """Samples per row."""
    select: str
    """One of SELECTORS."""
    temperature: float = 0.7
    """Sampling temperature of the k samples."""
    top_p: float = 0.95
    """Nucleus mass of the k samples."""
    limit: int | None = None
    """Rows of the set that are sampled (the first `limit`); None = all."""
    selector: Reward | None = None
    """The reward that ranks samples for `rm` (the reward model); unused otherwise."""

    def run(self, engine: Any, prompts: Sequence[Any], texts: Sequence[str], columns: dict[str, list],
            reward: Reward, max_new_tokens: int, seed: int = 0, row_ids: Sequence[str] | None = None) -> dict[str, Any]:
        """`run_tts` with this plan: trainer.evaluate reaches the TTS code only through a plan, so an
        eval domain without one does not run (nor is versioned by) this module (assets.eval_versions)."""
        return run_tts(engine, prompts, texts, columns, reward, self, max_new_tokens, seed, row_ids)


def majority_key(completion: str) -> str | None:
    """The answer a vote counts: the last boxed answer after `</think>`, else the final text; None if empty."""
    from rewards.math import answer_text, last_boxed

    text = answer_text(completion)
    boxed = last_boxed(text)
    key = re.sub(r"\s+", "", boxed) if boxed is not None else " ".join(text.split())
    return key or None


def visible_tests(raw: Any) -> str | None:
    """The tests a solver may see before submitting: the first stdio case or first assert; None if unparsable."""
    try:
        spec = json.loads(raw) if isinstance(raw, (str, bytes)) else dict(raw)
    except (TypeError, ValueError):
        return None
    if spec.get("kind") == "stdio" and spec.get("cases"):
        return json.dumps({**spec, "cases": spec["cases"][:1]})
    if spec.get("kind") == "assert" and spec.get("asserts"):
        return json.dumps({**spec, "asserts": spec["asserts"][:1]})
    return None


def select_majority(samples: Sequence[str]) -> int:
    keys = [majority_key(s) for s in samples]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return 0
    best = max(counts.values())
    winner = next(k for k in keys if k is not None and counts[k] == best)  # first seen wins ties
    return keys.index(winner)


def _scores(reward: Reward, prompts: list, completions: list[str], columns: dict[str, list]) -> list[float | None]:
    return [None if r.score is None else float(r.score) for r in reward.score(prompts, completions, **columns)]


def run_tts(engine: Any, prompts: Sequence[Any], texts: Sequence[str], columns: dict[str, list], reward: Reward,
            plan: TTSPlan, max_new_tokens: int, seed: int = 0, row_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """Sample, score and select for one (set, mode) -> {k, select, best_at_k: cell, select_at_k: cell}.

    `prompts` are the raw prompts (the rewards see them), `texts` the rendered generation prompts,
    `columns` the reward columns aligned with them. Cells are trainer.stats cells as dicts (score,
    lo, hi, interval, n) plus the per-row submitted scores under `rows`.
    """
    from generation.engine import PromptTooLong, Request, Sampling
    from trainer.stats import cell

    if plan.select not in SELECTORS:
        raise ValueError(f"select must be one of {SELECTORS}, got {plan.select!r}")
    n = len(texts) if plan.limit is None else min(plan.limit, len(texts))
    ids = list(row_ids or [str(i) for i in range(n)])[:n]
    sampling = Sampling(max_new_tokens=max_new_tokens, temperature=plan.temperature, top_p=plan.top_p, seed=seed)
    keep = list(range(n))
    while True:
        try:
            groups = engine.generate([Request(texts[i]) for i in keep], sampling, samples=plan.k)
            break
        except PromptTooLong as err:  # such rows are not sampled (they score as an empty answer)
            skip = set(err.indexes)
            keep = [i for j, i in enumerate(keep) if j not in skip]
    samples = {i: [s.text for s in g] for i, g in zip(keep, groups)}
    flat_rows = [i for i in range(n) for _ in range(plan.k)]
    flat = [samples[i][j] if i in samples else "" for i in range(n) for j in range(plan.k)]
    rows_of = {c: [v[i] for i in flat_rows] for c, v in columns.items()}
    scores = _scores(reward, [prompts[i] for i in flat_rows], flat, rows_of)
    best, chosen = [], []
    for i in range(n):
        mine = scores[i * plan.k:(i + 1) * plan.k]
        texts_i = flat[i * plan.k:(i + 1) * plan.k]
        valid = [s for s in mine if s is not None]
        best.append(max(valid) if valid else None)
        chosen.append(mine[_select(plan, reward, prompts[i], texts_i, {c: v[i] for c, v in columns.items()})])
    out: dict[str, Any] = {"k": plan.k, "select": plan.select, "temperature": plan.temperature, "rows_sampled": n}
    for name, values in (("best_at_k", best), ("select_at_k", chosen)):
        got = [v for v in values if v is not None]
        c = cell(got)
        out[name] = {"score": c.score, "lo": c.lo, "hi": c.hi, "interval": c.method, "n": c.n,
                     "rows": dict(zip(ids, values))}
    return out


def _select(plan: TTSPlan, reward: Reward, prompt: Any, samples: list[str], row: dict[str, Any]) -> int:
    if plan.select == "majority":
        return select_majority(samples)
    if plan.select == "rm":
        ranker = plan.selector or reward
        ranks = _scores(ranker, [prompt] * len(samples), samples, {})
        return max(range(len(samples)), key=lambda j: (ranks[j] is not None, ranks[j] or 0.0))
    visible = visible_tests(row.get("tests"))
    if visible is None:
        return 0
    cols = {**{c: [v] * len(samples) for c, v in row.items()}, "tests": [visible] * len(samples)}
    passed = _scores(reward, [prompt] * len(samples), samples, cols)
    return next((j for j, s in enumerate(passed) if s is not None and s >= 1.0), 0)
