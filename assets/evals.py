"""Evaluation assets: every checkpoint on every held-out domain, the forgetting matrix with the
cascade report, and the checks that say whether a stage worked.

Scores are mean reward × 100 ("points") per domain and mode, each with a 95% interval and the
per-row raw scores, so two checkpoints are compared on the same rows (trainer.gates):

  no_forgetting    (blocking by default) the new checkpoint against the best earlier checkpoint
                   on each earlier RL domain; fails on a drop both significant and over tolerance,
                   and on a cell it needs that has no score (`missing`: warns unless blocking)
  learned          the stage's own-domain gain over its input checkpoint; warns by default,
                   blocks with `evals.learned_blocking`; a kind with several eval domains
                   (multi_domain) gets one check that passes when every own domain learned
  training_signal  every trained stage: rewards with variance, a non-zero grad norm, a loss
                   that moved (read from its metrics.parquet)
"""


import json
from pathlib import Path
from typing import Any, Callable

import dagster as dg

from assets.checkpoints import checkpoint_chain
from assets.common import BENCHMARKS, CHECKPOINTS, EVALS, WorkTimer, key
from assets.eval_versions import domain_versions, eval_code_version, eval_config, reusable_cells
from assets.plots import domain_panels_markdown, matrix_markdown
from assets.publish import kill_point, publish, set_aside, temp_folder
from assets.store import CascadeStore, Context
from spec.hashing import closure_version, code_hash, stable_hash
from spec.kinds import eval_reward_for, kind_for_eval_domain, stage_kind
from spec.lineage import make_record, write_record
from spec.lineage_verify import set_aside as set_aside_unverified, verify_record
from spec.paths import portable_path
from spec.recipe import Recipe
from trainer.cascade_report import teacher_domains


def _interval(c: dict[str, Any]) -> str:
    return f"{c['lo']:.1f}–{c['hi']:.1f}" if c.get("lo") is not None else f"± {c.get('stderr', 0):.1f}"


def eval_domains(recipe: Recipe) -> list[str]:
    return list(dict.fromkeys(b.eval_domain for b in recipe.benchmarks if b.eval_domain))


def own_domains(recipe: Recipe) -> dict[str, list[str]]:
    """{RL stage: the eval domains it is judged on that the recipe evaluates}: its kind's (kind order), a
    stage with teachers (MOPD) its teachers' (trainer.cascade_report.teacher_domains); [] when none."""
    domains, taught = set(eval_domains(recipe)), teacher_domains(recipe, dict(checkpoint_chain(recipe)))
    return {rl.name: [d for d in (taught.get(rl.name) or stage_kind(rl.kind).eval_domains) if d in domains]
            for rl in recipe.rl_stages}


def eval_plan(recipe: Recipe) -> dict[str, list[str]]:
    """{checkpoint: domains it is evaluated on}, in cascade order; checkpoints with none are left out.

    `evals.scope: all`: every checkpoint on every domain. `gates`: what the gates read — the RL
    chain's input on the first trained domains; each RL checkpoint on the domains of its own and
    every earlier RL stage (no_forgetting) plus the next trained ones (the next stage's `learned`
    baseline); the last checkpoint on every domain (the final model's full table); each teacher
    on the domains it teaches (the report shows its score). A stage's domains: `own_domains`.
    """
    chain = checkpoint_chain(recipe)
    domains = eval_domains(recipe)
    if recipe.evals.scope == "all" or not recipe.rl_stages:
        return {s: domains for s, _ in chain} if domains else {}
    own = list(own_domains(recipe).values())
    names = [dict(chain)[recipe.rl_stages[0].name]] + [rl.name for rl in recipe.rl_stages]
    plan = {}
    for j, name in enumerate(names):
        want = {d for ds in own[:j] for d in ds} | set(next((ds for ds in own[j:] if ds), []))
        chosen = domains if j == len(names) - 1 else [d for d in domains if d in want]
        if chosen:
            plan[name] = chosen
    for taught in teacher_domains(recipe, dict(chain)).values():
        for d, teacher in taught.items():
            plan[teacher] = [x for x in domains if x == d or x in plan.get(teacher, ())]
    return {s: plan[s] for s, _ in chain if s in plan}


def _eval_sets(context: Context, store: CascadeStore, recipe: Recipe, rm_path: str | None,
               domains: list[str]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from curation.prompts import eval_rows
    from rewards.registry import get_reward, needs_reward_model
    from trainer.evaluate import EvalSet
    from trainer.tts import TTSPlan

    sets = {}
    for bench in recipe.benchmarks:
        if not bench.eval_domain or bench.eval_domain not in domains:
            continue
        kind, reward = kind_for_eval_domain(bench.eval_domain), eval_reward_for(bench.eval_domain)
        needs_rm = needs_reward_model(reward)
        if needs_rm and not rm_path:
            continue
        table = pq.read_table(store.upstream_path(context, key(BENCHMARKS, f"bench_{bench.name}")) / "data.parquet")
        if bench.eval_limit:
            if table.num_rows < bench.eval_limit:  # evaluate what there is, and say so
                context.log.warning(f"eval set {bench.name}: {table.num_rows} rows, fewer than eval_limit "
                                    f"{bench.eval_limit}")
            table = table.slice(0, bench.eval_limit)
        rows = eval_rows(table, kind.name, bench.name, domain=bench.domain)
        options = {"model_path": rm_path} if needs_rm else {}
        tts, modes = None, None
        if bench.tts:
            selector = get_reward("rm", model_path=rm_path) if bench.tts.select == "rm" and rm_path else None
            tts = TTSPlan(bench.tts.k, bench.tts.select, bench.tts.temperature, bench.tts.top_p, bench.tts.limit,
                          selector)
            modes = tuple(bench.tts.modes) if bench.tts.modes else None
        sets[bench.eval_domain] = EvalSet(table=rows, reward=get_reward(reward, **options), tts=tts,
                                          tts_modes=modes, max_new_tokens=bench.eval_max_new_tokens)
    return sets


def eval_input_keys(recipe: Recipe, stage: str) -> list[dg.AssetKey]:
    """Checkpoint first, then the eval sets, then the reward model (for the rm domain)."""
    keys = [key(CHECKPOINTS, stage)] + [key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks if b.eval_domain]
    return keys + ([key(CHECKPOINTS, recipe.reward_model.name)] if recipe.reward_model else [])


def ensure_eval(context: Context, store: CascadeStore, recipe: Recipe, stage: str,
                timer: WorkTimer | None = None) -> tuple[str, Path, dict]:
    """Evaluate a checkpoint once: the report is stored under a version that hashes each domain's
    version (assets.eval_versions: its code, the checkpoint, its eval sets, the reward model it
    reads, the eval config), and reused by whoever asks next (the eval asset and the checks share
    it). A new report evaluates only the domains no earlier report of this checkpoint holds at
    their version; the others' cells are taken from that report (its lineage names it)."""
    refs = [store.upstream_ref(context, k) for k in eval_input_keys(recipe, stage)]
    domains = eval_plan(recipe).get(stage, [])
    per_domain = domain_versions(recipe, domains, refs)
    code = eval_code_version(recipe, domains)
    version = stable_hash({"checkpoint": (refs[0]["asset"], refs[0]["data_version"]), "domains": per_domain})
    out = store.eval_root() / stage / version
    report = _read_eval(out)
    if report is not None and (problems := verify_record(out)):  # edited or damaged: kept aside, evaluated again
        context.log.warning(f"{'; '.join(problems)}: set aside as {set_aside_unverified(out)}")
        report = None
    if report is None:  # missing, or a half-written one an older writer left: evaluate (again)
        from trainer.evaluate import evaluate_checkpoint

        if out.exists() and _read_eval(out) is None:  # unreadable: never trusted (clean_leftovers removes it)
            set_aside(out)

        reused, came_from = reusable_cells(out.parent, per_domain)
        if reused:
            context.log.info(f"eval_{stage}: {', '.join(sorted(reused))} unchanged, taken from earlier reports")
        rm_path = refs[-1]["path"] if recipe.reward_model else None
        sets = _eval_sets(context, store, recipe, rm_path, [d for d in domains if d not in reused])
        raw: dict[str, Any] = {}
        if sets:
            with (timer or WorkTimer()).measure(f"evaluate {stage}"):
                raw = evaluate_checkpoint(refs[0]["path"], sets, modes=tuple(recipe.evals.modes),
                                          max_new_tokens=recipe.evals.max_new_tokens, seed=recipe.seed,
                                          engine=recipe.evals.engine, batch_size=recipe.evals.batch_size,
                                          dtype=recipe.evals.dtype, workers=recipe.evals.workers)
        # Points: mean reward x 100, so tolerances read as accuracy points.
        # Per-row scores stay raw (the paired tests need 0/1 pass rates as they are).
        limits = {b.eval_domain: b.eval_limit for b in recipe.benchmarks if b.eval_domain}
        report = {d: {m: {**to_points(c, ("score", "stderr", "lo", "hi")),
                          **({"tts": tts_points(c["tts"])} if "tts" in c else {}),
                          **({"eval_limit": limits[d], "short": sum(c["reasons"].values()) < limits[d]}
                             if limits.get(d) else {})}
                      for m, c in by.items()} for d, by in raw.items()}
        report = {d: reused[d] if d in reused else report[d] for d in domains if d in reused or d in report}
        tmp = temp_folder(out)  # written whole, then renamed: nothing half-written is ever read
        (tmp / "eval.json").write_text(json.dumps(report, indent=2))
        kill_point("eval_write", f"eval_{stage}")
        write_record(tmp, make_record(f"eval_{stage}", version, out, code, refs, kind="eval", domain_versions=per_domain,
                                      **({"reused_domains": came_from} if came_from else {})))
        publish(tmp, out)
        from trainer.model_card import set_eval_table

        set_eval_table(refs[0]["path"], scores_markdown(report))  # the checkpoint's model card
        report = _read_eval(out) or report  # the published one (a concurrent step may have won the rename)
    return version, out, report


def to_points(cell: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """`cell` with `fields` (mean rewards and their bounds) x 100, so tolerances read as accuracy points."""
    return {**cell, **{f: 100 * cell[f] for f in fields}}


def tts_points(tts: dict[str, Any]) -> dict[str, Any]:
    """A TTS result with best@k / select@k in points (per-row scores stay raw)."""
    return {**tts, **{name: to_points(tts[name], ("score", "lo", "hi")) for name in ("best_at_k", "select_at_k")}}


def scores_markdown(report: dict[str, Any]) -> str:
    """| domain | mode | score | 95% interval | n | of an eval report, plus best@k / select@k rows under TTS."""
    lines = []
    for d, by in report.items():
        for m, c in by.items():
            lines.append(f"| {d} | {m} | {c['score']:.1f} | {_interval(c)} | {c['n']}{' (short)' if c.get('short') else ''} |")
            t = c.get("tts")
            for name in ("best_at_k", "select_at_k") if t else ():
                label = f"{name.split('_')[0]}@{t['k']}" + (f" ({t['select']})" if name == "select_at_k" else "")
                lines.append(f"| {d} | {m} {label} | {t[name]['score']:.1f} | {_interval(t[name])} | {t[name]['n']} |")
    return "| domain | mode | score | 95% interval | n |\n|---|---|---:|---|---:|\n" + "\n".join(lines)


def _eval_asset(recipe: Recipe, stage: str, timer: WorkTimer) -> dg.AssetsDefinition:
    @dg.asset(key=key(EVALS, f"eval_{stage}"), deps=eval_input_keys(recipe, stage),
              group_name=EVALS, code_version=eval_code_version(recipe, eval_plan(recipe).get(stage, []))
              + stable_hash(eval_config(recipe), 8),
              kinds={"json"}, description=f"Held-out scores of {stage!r} on every domain, in /think and /no_think modes.")
    def evaluation(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        version, out, report = ensure_eval(context, store, recipe, stage, timer)
        table = scores_markdown(report)
        summary = {d: {m: {k: v for k, v in c.items() if k != "rows"} for m, c in by.items()} for d, by in report.items()}
        return dg.MaterializeResult(
            data_version=dg.DataVersion(version),
            metadata={"path": dg.MetadataValue.path(portable_path(out)), "data_version": version,
                      "scores": dg.MetadataValue.md(table), "report": dg.MetadataValue.json(summary),
                      "short_eval_sets": dg.MetadataValue.json(
                          sorted({d for d, by in report.items() for c in by.values() if c.get("short")}))})

    return evaluation


def _read_eval(folder: Path | None) -> dict[str, Any] | None:
    """A folder's eval report; None when it has none or cannot be read (treated as not evaluated)."""
    try:
        return json.loads((folder / "eval.json").read_text()) if folder else None
    except (OSError, ValueError):
        return None


def _read_metrics(folder: Path | None) -> list[dict[str, Any]] | None:
    if folder is None or not (folder / "metrics.parquet").exists():
        return None
    import pyarrow.parquet as pq

    return pq.read_table(folder / "metrics.parquet").to_pylist()


def cascade_report(recipe: Recipe, path_of: Callable[[dg.AssetKey], Path | None]) -> dict[str, Any]:
    """The cascade report (trainer.cascade_report) from the latest eval reports and stage metrics;
    `path_of` gives an asset's folder, None when it was never materialized (shown as missing)."""
    from trainer.cascade_report import build_report

    chain = checkpoint_chain(recipe)
    stages, parents = [s for s, _ in chain], dict(chain)
    domains = eval_domains(recipe)
    # A stage's evaluated own domains; a kind none of whose domains is evaluated keeps its list (shown missing).
    evaluated = own_domains(recipe)
    own = {rl.name: evaluated[rl.name] or stage_kind(rl.kind).eval_domains for rl in recipe.rl_stages}
    plan = eval_plan(recipe)
    evals = {s: _read_eval(path_of(key(EVALS, f"eval_{s}"))) if s in plan else None for s in stages}
    metrics = {s: _read_metrics(path_of(key(CHECKPOINTS, s))) for s in stages if parents[s]}
    return build_report(stages, parents, own, domains, evals, metrics, recipe.evals.forgetting_tolerance_points,
                        recipe.evals.alpha, planned=plan, teachers=teacher_domains(recipe, parents),
                        max_logprob_diff=recipe.evals.training_signal_max_logprob_diff)


REPORT_CODE = ("trainer.cascade_report:build_report", "assets.plots:matrix_markdown")
"""The report's code (with this package's wiring): editing it restales the forgetting matrix, no checkpoint or eval."""


def _forgetting_matrix(recipe: Recipe, stages: list[str], evaluated: list[str]) -> dg.AssetsDefinition:
    eval_keys = [key(EVALS, f"eval_{s}") for s in evaluated]
    code = code_hash("assets") + closure_version(REPORT_CODE, 8)

    @dg.asset(key=key(EVALS, "forgetting_matrix"), deps=eval_keys, group_name=EVALS, kinds={"json"},
              code_version=code,
              description="Domains × checkpoints with 95% intervals, each stage's own-domain gain with its "
                          "p-value, every gate's verdict and margin, training-curve summaries (the cascade report).")
    def forgetting_matrix(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from trainer.cascade_report import render_markdown

        def path_of(k: dg.AssetKey) -> Path | None:
            try:
                return store.upstream_path(context, k)
            except dg.Failure:
                return None

        report = cascade_report(recipe, path_of)
        domains = report["domains"]
        scores = {s: {d: c["score"] for d, c in report["matrix"][s].items() if c} for s in stages}
        version = stable_hash({"report": report, "code": code})  # edited report code: a new version, rendered anew
        final = store.eval_root() / "forgetting_matrix" / version
        out = temp_folder(final)  # written whole, then renamed over nothing (the version is its content and code)
        (out / "forgetting.json").write_text(json.dumps({"domains": domains, "checkpoints": stages, "scores": scores}, indent=2))
        (out / "forgetting.md").write_text(matrix_markdown(domains, stages, scores) + "\n")
        (out / "report.json").write_text(json.dumps(report, indent=2))
        markdown = render_markdown(report)
        (out / "report.md").write_text(markdown + "\n")
        write_record(out, make_record("forgetting_matrix", version, final, code,
                                      [store.upstream_ref(context, k) for k in eval_keys if path_of(k)], kind="eval"))
        out = publish(out, final)
        return dg.MaterializeResult(
            data_version=dg.DataVersion(version),
            metadata={"path": dg.MetadataValue.path(portable_path(out)), "data_version": version,
                      "matrix": dg.MetadataValue.md(markdown),
                      "plot": dg.MetadataValue.md(domain_panels_markdown(report))})

    return forgetting_matrix


def _load_evals(context: Context, store: CascadeStore, stages: list[str]) -> dict[str, dict[str, Any]]:
    return {s: json.loads((store.upstream_path(context, key(EVALS, f"eval_{s}")) / "eval.json").read_text())
            for s in stages}


def _no_forgetting_check(recipe: Recipe, stage: str, earlier_stages: list[str], earlier_domains: list[str],
                         timer: WorkTimer) -> dg.AssetChecksDefinition:
    # The check evaluates the new checkpoint itself (eval_<stage> is downstream of the gated
    # checkpoint, so it cannot be an input); ensure_eval stores the report for that asset.
    tol, alpha = recipe.evals.forgetting_tolerance_points, recipe.evals.alpha

    @dg.asset_check(asset=key(CHECKPOINTS, stage), name="no_forgetting", blocking=recipe.evals.blocking,
                    additional_deps=[*(key(EVALS, f"eval_{s}") for s in earlier_stages),
                                     *eval_input_keys(recipe, stage)[1:]],
                    description=f"No earlier domain ({', '.join(earlier_domains) or 'none'}) drops below the best "
                                f"earlier checkpoint by more than {tol} points with paired p < {alpha}.")
    def no_forgetting(context: dg.AssetCheckExecutionContext, store: CascadeStore) -> dg.AssetCheckResult:
        from trainer.gates import forgetting_gate, forgetting_severity, forgetting_status

        _, _, child = ensure_eval(context, store, recipe, stage, timer)
        passed, rows = forgetting_gate(child, _load_evals(context, store, earlier_stages), earlier_domains, tol, alpha)
        margins = [r["margin"] for r in rows if "margin" in r]
        status = forgetting_status(rows)  # a missing cell fails it too (trainer.gates)
        severity = dg.AssetCheckSeverity[forgetting_severity(status, recipe.evals.blocking)]
        return dg.AssetCheckResult(passed=passed, severity=severity, metadata={
            "status": status, "domains": dg.MetadataValue.json(rows), "tolerance_points": tol, "alpha": alpha,
            **({"worst_margin_points": min(margins)} if margins else {})})

    return no_forgetting


def _learned_check(recipe: Recipe, stage: str, parent: str, domains: list[str],
                   timer: WorkTimer) -> dg.AssetChecksDefinition:
    alpha, blocking = recipe.evals.alpha, recipe.evals.learned_blocking
    what = f"its own domain ({domains[0]})" if len(domains) == 1 else f"each of its own domains ({', '.join(domains)})"

    @dg.asset_check(asset=key(CHECKPOINTS, stage), name="learned", blocking=blocking,
                    additional_deps=[key(EVALS, f"eval_{parent}"), *eval_input_keys(recipe, stage)[1:]],
                    description=f"{stage} raises {what} over {parent}: paired test, p < {alpha}"
                                f" ({'blocking' if blocking else 'warns'}).")
    def learned(context: dg.AssetCheckExecutionContext, store: CascadeStore) -> dg.AssetCheckResult:
        from trainer.gates import combined_verdict, learned_gates

        _, _, child = ensure_eval(context, store, recipe, stage, timer)
        passed, gates = learned_gates(_load_evals(context, store, [parent])[parent], child, domains, alpha)
        if len(gates) == 1:  # one own domain: the verdict and its numbers, as before
            g = gates[0]
            numbers = {k: g[k] for k in ("gain", "gain_lo", "gain_hi", "p_value") if k in g}
            metadata = {"verdict": dg.MetadataValue.json(g), "status": g["status"], **numbers}
        else:
            metadata = {"domains": dg.MetadataValue.json(gates),
                        "status": combined_verdict(gates)["status"],
                        **{f"gain_{g['domain']}": g["gain"] for g in gates if "gain" in g}}
        return dg.AssetCheckResult(
            passed=passed, severity=dg.AssetCheckSeverity.ERROR if blocking else dg.AssetCheckSeverity.WARN,
            metadata=metadata)

    return learned


def _training_signal_check(recipe: Recipe, stage: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=key(CHECKPOINTS, stage), name="training_signal",
                    blocking=recipe.evals.training_signal_blocking,
                    description="The stage could learn: rewards had variance, the grad norm was not 0 on every "
                                "step, the loss moved, RL log-probs matched the sampler's (from its metrics.parquet).")
    def training_signal_check(context: dg.AssetCheckExecutionContext, store: CascadeStore) -> dg.AssetCheckResult:
        from trainer.gates import curve_summary, training_signal

        rows = _read_metrics(store.upstream_path(context, key(CHECKPOINTS, stage))) or []
        passed, problems = training_signal(rows, max_logprob_diff=recipe.evals.training_signal_max_logprob_diff)
        return dg.AssetCheckResult(passed=passed, severity=dg.AssetCheckSeverity.ERROR, metadata={
            "problems": dg.MetadataValue.json(problems), "steps": len(rows),
            "curves": dg.MetadataValue.json(curve_summary(rows))})

    return training_signal_check


def build_eval_assets(recipe: Recipe, timer: WorkTimer) -> tuple[list, list]:
    chain = checkpoint_chain(recipe)
    parents = dict(chain)
    checks = [_training_signal_check(recipe, s) for s, p in chain if p is not None]
    plan = eval_plan(recipe)
    if not plan:
        return [], checks
    stages = [s for s, _ in chain]
    evaluated = [s for s in stages if s in plan]
    assets = [_eval_asset(recipe, s, timer) for s in evaluated] + [_forgetting_matrix(recipe, stages, evaluated)]
    own_by_stage = own_domains(recipe)
    earlier: list[str] = []
    for rl in recipe.rl_stages:
        before = [s for s in stages[:stages.index(rl.name)] if s in plan]
        checks.append(_no_forgetting_check(recipe, rl.name, before, list(earlier), timer))
        own = own_by_stage[rl.name]
        if own:
            checks.append(_learned_check(recipe, rl.name, parents[rl.name], own, timer))
        earlier += [d for d in own or stage_kind(rl.kind).eval_domains if d not in earlier]  # as the report
    return assets, checks
