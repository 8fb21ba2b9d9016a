"""Evaluation assets: every checkpoint on every held-out domain, the forgetting matrix, and
the blocking no-forgetting check that stops a stage that made the model forget.

Scores are mean reward × 100 ("points") per domain and mode; stderr is std/sqrt(n) in the
same unit. The no-forgetting check compares an RL checkpoint with its parent on the domains
of earlier RL stages: a drop larger than max(tolerance points, 2 standard errors of the
difference) fails it, so small eval sets do not block on noise.
"""


import json
import math
from pathlib import Path
from typing import Any

import dagster as dg

from assets.checkpoints import checkpoint_chain
from assets.common import BENCHMARKS, CHECKPOINTS, EVALS, WorkTimer, cascade_home, key, upstream_path, upstream_ref
from assets.plots import matrix_markdown, matrix_plot_markdown
from spec.hashing import code_hash, stable_hash
from spec.kinds import kind_for_eval_domain, stage_kind
from spec.lineage import make_record, write_record
from spec.recipe import Recipe

def eval_root() -> Path:
    return cascade_home() / "evals"


def domain_scores(report: dict[str, Any]) -> dict[str, tuple[float, float, int]]:
    """(mean score over modes, stderr of that mean, n) per domain of an eval report."""
    out = {}
    for domain, by_mode in report.items():
        cells = [c for c in by_mode.values() if c.get("n")]
        if not cells:
            continue
        mean = sum(c["score"] for c in cells) / len(cells)
        se = math.sqrt(sum(c["stderr"] ** 2 for c in cells)) / len(cells)
        out[domain] = (mean, se, sum(c["n"] for c in cells))
    return out


def _eval_sets(context: dg.AssetExecutionContext, recipe: Recipe, rm_path: str | None) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from curation.prompts import eval_rows
    from rewards.registry import get_reward, needs_reward_model
    from trainer.evaluate import EvalSet

    sets = {}
    for bench in recipe.benchmarks:
        if not bench.eval_domain:
            continue
        kind = kind_for_eval_domain(bench.eval_domain)
        needs_rm = needs_reward_model(kind.eval_reward)
        if needs_rm and not rm_path:
            continue
        table = pq.read_table(upstream_path(context, key(BENCHMARKS, f"bench_{bench.name}")) / "data.parquet")
        if bench.eval_limit:
            table = table.slice(0, bench.eval_limit)
        rows = eval_rows(table, kind.name, bench.name)
        options = {"model_path": rm_path} if needs_rm else {}
        sets[bench.eval_domain] = EvalSet(table=rows, reward=get_reward(kind.eval_reward, **options))
    return sets


def eval_code_version(recipe: Recipe) -> str:
    """The eval code: the trainer's, plus the source versions of the recipe's eval rewards only
    (editing a reward no eval uses, or the rest of `rewards`, leaves evals fresh)."""
    from rewards.registry import reward_code_versions

    names = sorted({kind_for_eval_domain(b.eval_domain).eval_reward for b in recipe.benchmarks if b.eval_domain})
    return code_hash("trainer") + stable_hash(reward_code_versions(names), 8)


def eval_input_keys(recipe: Recipe, stage: str) -> list[dg.AssetKey]:
    """Checkpoint first, then the eval sets, then the reward model (for the rm domain)."""
    keys = [key(CHECKPOINTS, stage)] + [key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks if b.eval_domain]
    return keys + ([key(CHECKPOINTS, recipe.reward_model.name)] if recipe.reward_model else [])


def ensure_eval(context, recipe: Recipe, stage: str, timer: WorkTimer | None = None) -> tuple[str, Path, dict]:
    """Evaluate a checkpoint once: the report is stored under a version that hashes the
    checkpoint, eval sets, reward model and eval config, and reused by whoever asks next
    (the eval asset and the no-forgetting check share it)."""
    refs = [upstream_ref(context, k) for k in eval_input_keys(recipe, stage)]
    config = recipe.evals.model_dump()
    code = eval_code_version(recipe)
    version = stable_hash({"inputs": [(r["asset"], r["data_version"]) for r in refs], "config": config, "code": code})
    out = eval_root() / stage / version
    report_path = out / "eval.json"
    if not report_path.exists():
        from trainer.evaluate import evaluate_checkpoint

        rm_path = refs[-1]["path"] if recipe.reward_model else None
        with (timer or WorkTimer()).measure(f"evaluate {stage}"):
            raw = evaluate_checkpoint(refs[0]["path"], _eval_sets(context, recipe, rm_path),
                                      modes=tuple(recipe.evals.modes), max_new_tokens=recipe.evals.max_new_tokens,
                                      seed=recipe.seed)
        # Points: mean reward x 100, so tolerances read as accuracy points.
        report = {d: {m: {**c, "score": 100 * c["score"], "stderr": 100 * c["stderr"]} for m, c in by.items()}
                  for d, by in raw.items()}
        out.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(report, indent=2))
        write_record(out, make_record(f"eval_{stage}", version, out, code, refs, kind="eval"))
    return version, out, json.loads(report_path.read_text())


def _eval_asset(recipe: Recipe, stage: str, timer: WorkTimer) -> dg.AssetsDefinition:
    @dg.asset(key=key(EVALS, f"eval_{stage}"), deps=eval_input_keys(recipe, stage),
              group_name=EVALS, code_version=eval_code_version(recipe) + stable_hash(recipe.evals.model_dump(), 8),
              kinds={"json"}, description=f"Held-out scores of {stage!r} on every domain, in /think and /no_think modes.")
    def evaluation(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        version, out, report = ensure_eval(context, recipe, stage, timer)
        table = "| domain | mode | score | ± | n |\n|---|---|---:|---:|---:|\n" + "\n".join(
            f"| {d} | {m} | {c['score']:.1f} | {c['stderr']:.1f} | {c['n']} |" for d, by in report.items() for m, c in by.items())
        return dg.MaterializeResult(
            data_version=dg.DataVersion(version),
            metadata={"path": dg.MetadataValue.path(str(out)), "data_version": version,
                      "scores": dg.MetadataValue.md(table), "report": dg.MetadataValue.json(report)})

    return evaluation


def _forgetting_matrix(recipe: Recipe, stages: list[str]) -> dg.AssetsDefinition:
    eval_keys = [key(EVALS, f"eval_{s}") for s in stages]

    @dg.asset(key=key(EVALS, "forgetting_matrix"), deps=eval_keys, group_name=EVALS, kinds={"json"},
              code_version=code_hash("assets"),
              description="Domains × checkpoints: how each stage moved every domain's held-out score.")
    def forgetting_matrix(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        scores: dict[str, dict[str, float]] = {}
        for stage, k in zip(stages, eval_keys):
            report = json.loads((upstream_path(context, k) / "eval.json").read_text())
            scores[stage] = {d: s[0] for d, s in domain_scores(report).items()}
        domains = sorted({d for s in scores.values() for d in s})
        version = stable_hash(scores)
        out = eval_root() / "forgetting_matrix" / version
        out.mkdir(parents=True, exist_ok=True)
        (out / "forgetting.json").write_text(json.dumps({"domains": domains, "checkpoints": stages, "scores": scores}, indent=2))
        table = matrix_markdown(domains, stages, scores)
        (out / "forgetting.md").write_text(table + "\n")
        write_record(out, make_record("forgetting_matrix", version, out, code_hash("assets"),
                                      [upstream_ref(context, k) for k in eval_keys], kind="eval"))
        return dg.MaterializeResult(
            data_version=dg.DataVersion(version),
            metadata={"path": dg.MetadataValue.path(str(out)), "data_version": version,
                      "matrix": dg.MetadataValue.md(table),
                      "plot": dg.MetadataValue.md(matrix_plot_markdown(domains, stages, scores))})

    return forgetting_matrix


def forgetting_verdict(parent: dict[str, Any], child: dict[str, Any], domains: list[str], tolerance: float) -> tuple[bool, list[dict[str, Any]]]:
    """Compare two eval reports on `domains`; returns (passed, per-domain rows)."""
    p, c = domain_scores(parent), domain_scores(child)
    rows, passed = [], True
    for d in domains:
        if d not in p or d not in c:
            continue
        drop = p[d][0] - c[d][0]
        allowed = max(tolerance, 2 * math.sqrt(p[d][1] ** 2 + c[d][1] ** 2))
        ok = drop <= allowed
        passed &= ok
        rows.append({"domain": d, "parent": round(p[d][0], 2), "child": round(c[d][0], 2),
                     "drop": round(drop, 2), "allowed": round(allowed, 2), "ok": ok})
    return passed, rows


def _no_forgetting_check(recipe: Recipe, stage: str, parent: str, earlier_domains: list[str],
                         timer: WorkTimer) -> dg.AssetChecksDefinition:
    # The check evaluates the new checkpoint itself (eval_<stage> is downstream of the gated
    # checkpoint, so it cannot be an input); ensure_eval stores the report for that asset.
    parent_key = key(EVALS, f"eval_{parent}")
    tol = recipe.evals.forgetting_tolerance_points

    @dg.asset_check(asset=key(CHECKPOINTS, stage), name="no_forgetting", blocking=recipe.evals.blocking,
                    additional_deps=[parent_key, *eval_input_keys(recipe, stage)[1:]],
                    description=f"No earlier domain ({', '.join(earlier_domains) or 'none'}) drops by more than "
                                f"max({tol} points, 2 standard errors) from {parent} to {stage}.")
    def no_forgetting(context) -> dg.AssetCheckResult:
        _, _, child = ensure_eval(context, recipe, stage, timer)
        par = json.loads((upstream_path(context, parent_key) / "eval.json").read_text())
        passed, rows = forgetting_verdict(par, child, earlier_domains, tol)
        return dg.AssetCheckResult(passed=passed, severity=dg.AssetCheckSeverity.ERROR,
                                   metadata={"domains": dg.MetadataValue.json(rows), "tolerance_points": tol})

    return no_forgetting


def build_eval_assets(recipe: Recipe, timer: WorkTimer) -> tuple[list, list]:
    if not any(b.eval_domain for b in recipe.benchmarks):
        return [], []
    chain = checkpoint_chain(recipe)
    stages = [s for s, _ in chain]
    assets = [_eval_asset(recipe, s, timer) for s in stages] + [_forgetting_matrix(recipe, stages)]
    checks, earlier = [], []
    for rl in recipe.rl_stages:
        parent = dict(chain)[rl.name]
        checks.append(_no_forgetting_check(recipe, rl.name, parent, list(earlier), timer))
        own = stage_kind(rl.kind).eval_domain
        if own and own not in earlier:
            earlier.append(own)
    return assets, checks
