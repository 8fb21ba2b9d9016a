"""What an eval is versioned by, one domain at a time, and the cells an unchanged domain reuses.

A checkpoint's eval asset scores several domains, and Dagster versions an asset whole. So its code
version is made of per-domain code versions (`domain_code_version`: the import closure of the code
that scores a set, found without importing it by spec.hashing.closure_version, plus the version of
that domain's eval reward and its benchmarks' eval settings: limit, budget, TTS), and covers only
the domains the asset scores (`eval_plan`): editing the math reward re-versions the math domain
only, and an eval that does not score math stays fresh. Each domain's cells carry a data version
(`domain_versions`: its code, the checkpoint, its eval sets, the reward model when it reads one, the
eval config); the lineage record lists them, and a new report takes an unchanged domain's cells from
an earlier report of the same checkpoint whose record verifies (`reusable_cells`), so only the
domains whose version moved are evaluated again.

Why one asset per checkpoint rather than one per (checkpoint, domain): the checkpoint is loaded
once for all its domains, and the gates, the report and the forgetting matrix keep reading one
report per checkpoint; what reruns is still exactly the domains that changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spec.hashing import closure_version, stable_hash
from spec.kinds import eval_reward_for
from spec.lineage_verify import read_verified_record
from spec.recipe import Recipe

EVAL_CODE = ("trainer.evaluate:evaluate_checkpoint", "curation.prompts:eval_rows", "rewards.registry:get_reward")
"""Entry points that score every eval set: completions and their scoring, the rows, the reward lookup;
the recipe's generation engine (named by a string) and, for a set with a TTS plan, trainer.tts join them."""

_GATE_FIELDS = {"forgetting_tolerance_points", "blocking", "alpha", "learned_blocking", "training_signal_blocking",
                "training_signal_max_logprob_diff"}


def eval_config(recipe: Recipe) -> dict[str, Any]:
    """The eval settings that change scores (gate settings do not: changing them re-runs no eval)."""
    return recipe.evals.model_dump(exclude=_GATE_FIELDS)


def _benches(recipe: Recipe, domain: str) -> list[Any]:
    return [b for b in recipe.benchmarks if b.eval_domain == domain]


def _reads_rm(recipe: Recipe, domain: str) -> bool:
    """Whether scoring `domain` reads the reward model (its eval reward, or a TTS plan selecting by it)."""
    from rewards.registry import needs_reward_model

    return needs_reward_model(eval_reward_for(domain)) or any(
        b.tts and b.tts.select == "rm" for b in _benches(recipe, domain))


def domain_code_version(recipe: Recipe, domain: str) -> str:
    """The code that scores eval `domain`: EVAL_CODE's import closure with the engine's (and trainer.tts
    when a benchmark of the domain samples k), the domain's eval reward version (and the reward
    model's when a TTS plan selects by it), and the benchmarks' eval settings (eval_limit, eval_max_new_tokens, tts)."""
    from generation.engine import ENGINES
    from rewards.registry import reward_code_versions

    benches = _benches(recipe, domain)
    targets = [*EVAL_CODE, ENGINES[recipe.evals.engine], *(["trainer.tts:TTSPlan"] if any(b.tts for b in benches) else []),
               *(["generation.hf_workers:open_hf"] if recipe.evals.engine == "hf" and recipe.evals.workers != 1 else [])]
    rewards = [eval_reward_for(domain), *(["rm"] if any(b.tts and b.tts.select == "rm" for b in benches) else [])]
    return stable_hash({"code": closure_version(targets), "rewards": reward_code_versions(sorted(set(rewards))),
                        "sets": [_eval_settings(b) for b in benches]})


def _eval_settings(bench: Any) -> dict[str, Any]:
    """A benchmark's settings that change its scores; an unset budget is left out so that the versions
    of sets that do not set one stay what they were before the field existed."""
    budget = {"eval_max_new_tokens": bench.eval_max_new_tokens} if bench.eval_max_new_tokens else {}
    return {**bench.model_dump(mode="json", include={"eval_limit", "tts"}), **budget}


def eval_code_version(recipe: Recipe, domains: list[str]) -> str:
    """Code version of an eval that scores `domains`: their domain code versions only."""
    return stable_hash({d: domain_code_version(recipe, d) for d in domains})


def domain_versions(recipe: Recipe, domains: list[str], refs: list[dict[str, Any]]) -> dict[str, str]:
    """{domain: version of its cells}. `refs`: the eval's inputs as assets.evals.eval_input_keys orders
    them (the checkpoint, every eval set, then the reward model when the recipe has one)."""
    benches = [b.name for b in recipe.benchmarks if b.eval_domain]
    sets = dict(zip(benches, refs[1:1 + len(benches)], strict=True))
    rm = refs[-1] if recipe.reward_model else None
    config = {k: v for k, v in eval_config(recipe).items() if k != "scope"}  # which domains, not their scores
    out = {}
    for d in domains:
        inputs = [refs[0], *(sets[b.name] for b in _benches(recipe, d)), *([rm] if rm and _reads_rm(recipe, d) else [])]
        out[d] = stable_hash({"code": domain_code_version(recipe, d), "config": config, "seed": recipe.seed,
                              "inputs": [(r["asset"], r["data_version"]) for r in inputs]})
    return out


def reusable_cells(stage_dir: Path, wanted: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Cells of earlier reports in `stage_dir` (an eval's version folders) for the domains whose recorded
    version equals the one `wanted`: ({domain: cell}, {domain: the folder it came from}). A folder
    whose record does not verify (spec.lineage_verify) or whose report cannot be read gives nothing."""
    cells: dict[str, Any] = {}
    came_from: dict[str, str] = {}
    folders = sorted(p for p in stage_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if stage_dir.is_dir() else []
    for folder in folders:
        record, problems = read_verified_record(folder)
        recorded = (record or {}).get("domain_versions") or {}
        matches = [d for d, v in wanted.items() if d not in cells and recorded.get(d) == v]
        if problems or not matches:
            continue
        try:
            report = json.loads((folder / "eval.json").read_text())
        except (OSError, ValueError):
            continue
        for d in matches:
            if isinstance(report, dict) and d in report:
                cells[d], came_from[d] = report[d], folder.name
    return cells, came_from
