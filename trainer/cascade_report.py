"""The cascade report: did each stage learn its domain, and did it keep the earlier ones?

What: from every checkpoint's eval report and every stage's metrics (plain dicts, so the
Dagster asset and `cascade report` build the same thing), one JSON-able report holding

  matrix     checkpoint × domain: score in points with its 95% interval, per mode and pooled
             (with best@k / select@k under test-time scaling); a domain without a score is
             `null`, never 0: "missing" when it should have one, "not evaluated" when the eval
             scope (`evals.scope: gates`) skips it on purpose (listed under `not_evaluated`)
  stages     per trained stage: own-domain gain over its input checkpoint with interval and
             p-value (`learned`; a stage that trains several domains has one verdict per domain
             under `learned_by_domain`, and `learned` passes when all do), the no-forgetting
             verdict against the best earlier checkpoint on each earlier domain with margins,
             the training-signal verdict, curve summaries (loss, rewards, grad norm, entropy and,
             for RL stages, `rollout_logprob_diff_mean` / `_max`: how far the training forward's
             log-probs were from the sampler's, which the training-signal verdict bounds)

and two renderings: `render_text` (terminal) and `render_markdown` (asset metadata, README).
The verdicts come from trainer.gates, the functions the asset checks call.

Which domains a stage is judged on: its kind's eval domains, except for a stage that distils
(MOPD), which has none of its own and is judged on its teachers' domains (`teacher_domains`,
also what the asset checks and the eval plan read); each such `learned` verdict names its
teacher and the teacher's score, so the report shows whether the student moved toward it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from spec.train import MAX_LOGPROB_DIFF
from trainer.gates import (ALPHA, combined_verdict, curve_summary, domain_cell, forgetting_gate, forgetting_status,
                           learned_gates, training_signal)
from trainer.stats import cell

if TYPE_CHECKING:
    from spec.recipe import Recipe

Report = Mapping[str, Mapping[str, Mapping[str, Any]]]


def teacher_domains(recipe: Recipe, parents: Mapping[str, str | None]) -> dict[str, dict[str, str]]:
    """{RL stage: {eval domain: teacher checkpoint}} of each stage with teachers (MOPD, through
    StageOptions.teachers_of): the stage's sources -> their row domains (`Recipe.source`: a
    generation's are its input source's) -> the teacher each is routed to -> the eval domains of
    that row domain's benchmarks, in source order. A row domain routed to the stage's own input
    checkpoint (`parents`) is left out: that teacher is the student as it starts, so there is
    nothing to learn from it, and no_forgetting already guards the domains of the stage that
    trained it."""
    out: dict[str, dict[str, str]] = {}
    for rl in recipe.rl_stages:
        if rl.options is None:
            continue
        routed = rl.options.teachers_of(list(dict.fromkeys(recipe.source(s).domain for s in rl.sources)))
        taught: dict[str, str] = {}
        for row, teacher in routed.items():
            if teacher == parents.get(rl.name):
                continue
            for b in recipe.benchmarks:
                if b.eval_domain and b.domain == row:
                    taught.setdefault(b.eval_domain, teacher)
        if taught:
            out[rl.name] = taught
    return out


def _mode_cells(report: Report, domain: str) -> dict[str, dict[str, Any]]:
    out = {}
    for mode, c in (report.get(domain) or {}).items():
        if not c.get("n"):
            continue
        if "lo" not in c and "rows" in c:
            ci = cell([s for s in c["rows"].values() if s is not None], scale=100.0)
            c = {**c, "lo": ci.lo, "hi": ci.hi}
        out[mode] = {"score": c["score"], "lo": c.get("lo"), "hi": c.get("hi"), "n": c["n"]}
        if c.get("tts"):
            t = c["tts"]
            out[mode]["tts"] = {"k": t["k"], "select": t["select"],
                                **{name: {f: t[name][f] for f in ("score", "lo", "hi", "n")}
                                   for name in ("best_at_k", "select_at_k")}}
    return out


def build_report(stages: Sequence[str], parents: Mapping[str, str | None],
                 own_domains: Mapping[str, str | Sequence[str] | None],
                 domains: Sequence[str], evals: Mapping[str, Report | None],
                 metrics: Mapping[str, Sequence[Mapping[str, Any]] | None], tolerance: float,
                 alpha: float = ALPHA, planned: Mapping[str, Sequence[str]] | None = None,
                 max_logprob_diff: float | None = MAX_LOGPROB_DIFF,
                 teachers: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Any]:
    """The report of a cascade.

    `stages`: checkpoints in cascade order (base model first); `parents`: each stage's input
    checkpoint; `own_domains`: the eval domain(s) each RL stage trains (RL stages only, in order;
    a name or a list, first = the kind's `eval_domain`);
    `evals`: eval report per stage (None when not evaluated); `metrics`: metrics rows per
    trained stage; `planned`: the domains each checkpoint is meant to be evaluated on (None = all);
    `max_logprob_diff`: the training-signal bound on `rollout_logprob_diff_mean` (trainer.gates);
    `teachers`: {stage: {eval domain: teacher checkpoint}} of stages judged on their teachers'
    domains (`teacher_domains`): their verdicts add `teacher` and `teacher_score`.
    """
    matrix: dict[str, dict[str, Any]] = {}
    for stage in stages:
        rep = evals.get(stage)
        matrix[stage] = {}
        for d in domains:
            pooled = domain_cell(rep, d) if rep else None
            matrix[stage][d] = None if pooled is None else {**pooled, "modes": _mode_cells(rep, d)}
    out_stages, earlier_domains = [], []
    for i, stage in enumerate(stages):
        parent = parents.get(stage)
        if parent is None:
            continue
        entry: dict[str, Any] = {"stage": stage, "parent": parent, "gates": {}}
        rows = metrics.get(stage)
        if rows is not None:
            passed, problems = training_signal(rows, max_logprob_diff=max_logprob_diff)
            entry["gates"]["training_signal"] = {"passed": passed, "problems": problems}
            entry["curves"] = curve_summary(rows)
        if stage in own_domains:
            owns = _as_list(own_domains[stage])
            rep, par = evals.get(stage), evals.get(parent)
            entry["own_domain"], entry["own_domains"] = (owns[0] if owns else None), owns
            if rep is not None and par is not None:
                _, gates = learned_gates(par, rep, owns, alpha)
            else:
                gates = [{"domain": d, "status": "missing", "passed": False} for d in owns or [None]]
            for g in gates:  # a distilling stage: where its teacher stands on the domain
                teacher = (teachers or {}).get(stage, {}).get(g["domain"])
                if teacher is not None:
                    score = (matrix.get(teacher) or {}).get(g["domain"])
                    g.update(teacher=teacher, teacher_score=None if score is None else round(score["score"], 2))
            # Without this stage's eval every earlier domain is a `missing` row: never a pass.
            earlier = {s: evals[s] for s in stages[:i] if evals.get(s) is not None}
            passed, frows = forgetting_gate(rep or {}, earlier, list(earlier_domains), tolerance, alpha)
            entry["gates"]["no_forgetting"] = {"passed": passed, "status": forgetting_status(frows), "domains": frows}
            entry["gates"]["learned"] = gates[0] if len(gates) == 1 else combined_verdict(gates)
            if len(owns) > 1:
                entry["gates"]["learned_by_domain"] = {g["domain"]: g for g in gates}
            earlier_domains += [d for d in owns if d not in earlier_domains]
        out_stages.append(entry)
    skipped = {s: [d for d in domains if d not in planned.get(s, ())] for s in stages} if planned is not None else {}
    return {"domains": list(domains), "checkpoints": list(stages), "tolerance_points": tolerance, "alpha": alpha,
            "matrix": matrix, "stages": out_stages, "not_evaluated": {s: ds for s, ds in skipped.items() if ds}}


def _as_list(own: str | Sequence[str] | None) -> list[str]:
    return [] if not own else [own] if isinstance(own, str) else list(own)


def _learned_rows(entry: Mapping[str, Any]) -> list[tuple[str | None, Mapping[str, Any] | None]]:
    """(own domain, its learned verdict) for each own domain of a stage entry."""
    by = entry["gates"].get("learned_by_domain")
    if by:
        return list(by.items())
    return [(entry.get("own_domain"), entry["gates"].get("learned"))]


def _shown(report: Mapping[str, Any]) -> list[str]:
    """Checkpoints with at least one domain meant to be evaluated (all of them without a scope)."""
    skipped = report.get("not_evaluated") or {}
    return [s for s in report["checkpoints"] if len(skipped.get(s, ())) < len(report["domains"])]


def _cell_text(report: Mapping[str, Any], stage: str, domain: str, c: Mapping[str, Any] | None) -> str:
    if c is None and domain in (report.get("not_evaluated") or {}).get(stage, ()):
        return "not evaluated"
    return _fmt(c)


def tts_lines(report: Mapping[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(checkpoint, domain/mode, greedy, best@k, select@k, selector) for every TTS cell of the matrix."""
    out = []
    for s in report["checkpoints"]:
        for d in report["domains"]:
            for m, c in ((report["matrix"][s].get(d) or {}).get("modes") or {}).items():
                t = c.get("tts")
                if t:
                    out.append((s, f"{d}/{m}", _fmt(c), _fmt(t["best_at_k"]), _fmt(t["select_at_k"]),
                                f"{t['select']}, k={t['k']}"))
    return out


def _fmt(c: Mapping[str, Any] | None) -> str:
    if c is None:
        return "missing"
    if c.get("lo") is None:
        return f"{c['score']:.1f}"
    return f"{c['score']:.1f} [{c['lo']:.1f}, {c['hi']:.1f}]"


def _learned_text(g: Mapping[str, Any] | None) -> str:
    if not g or g.get("status") in (None, "missing", "no_eval_domain"):
        text = (g or {}).get("status", "–")
    else:
        text = (f"{g['gain']:+.1f} [{g['gain_lo']:+.1f}, {g['gain_hi']:+.1f}] p={g['p_value']:.3g} "
                f"({g['status']})")
    if g and g.get("teacher"):
        score = g.get("teacher_score")
        text += f"; teacher {g['teacher']} {'not evaluated' if score is None else f'{score:.1f}'}"
    return text


def _forgetting_text(g: Mapping[str, Any] | None) -> str:
    if not g:
        return "–"
    if not g["domains"]:
        return "pass (no earlier domain)"
    rows = [r for r in g["domains"] if r.get("status") != "missing"]
    missing = ", ".join(r["domain"] for r in g["domains"] if r.get("status") == "missing")
    if not rows:  # a cell the gate needed has no score: not a pass (trainer.gates.forgetting_status)
        return f"missing ({missing})"
    word = {"fail": "FAIL", "missing": "missing"}.get(forgetting_status(g["domains"]), "pass")
    worst = min(rows, key=lambda r: r["margin"])
    return (f"{word} (worst: {worst['domain']} drop {worst['drop']:+.1f} vs {worst['best']}, "
            f"p={worst['p_value']:.3g}, margin {worst['margin']:+.1f}{'; missing: ' + missing if missing else ''})")


def _signal_text(g: Mapping[str, Any] | None) -> str:
    if not g:
        return "–"
    return "pass" if g["passed"] else "FAIL: " + "; ".join(g["problems"])


def render_text(report: Mapping[str, Any]) -> str:
    """The report for a terminal: matrix (rows = domain·mode, columns = checkpoints), then stages."""
    stages, domains, matrix = _shown(report), report["domains"], report["matrix"]
    modes = sorted({m for s in stages for d in domains for m in ((matrix[s][d] or {}).get("modes") or {})})
    labels = [(d, None) for d in domains] + [(d, m) for d in domains for m in modes]
    lines = ["Held-out scores, points, 95% interval (rows = domain[/mode], columns = checkpoints):"]
    table = [["domain"] + list(stages)]
    for d, m in labels:
        cells = []
        for s in stages:
            c = matrix[s][d]
            cells.append(_cell_text(report, s, d, c if m is None or c is None else c["modes"].get(m)))
        table.append([d if m is None else f"{d}/{m}"] + cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in table]
    if tts_lines(report):
        lines += ["", "Test-time scaling (greedy | best@k | select@k):"]
        lines += [f"  {s} {dm}: {g} | {b} | {sel} ({how})" for s, dm, g, b, sel, how in tts_lines(report)]
    lines.append("")
    lines.append(f"Stages (alpha {report['alpha']}, forgetting tolerance {report['tolerance_points']} points):")
    for e in report["stages"]:
        g = e["gates"]
        lines.append(f"  {e['stage']} (from {e['parent']})")
        if "own_domain" in e:
            lines += [f"    learned {d}: {_learned_text(lg)}" for d, lg in _learned_rows(e)]
            lines.append(f"    no_forgetting: {_forgetting_text(g.get('no_forgetting'))}")
        lines.append(f"    training_signal: {_signal_text(g.get('training_signal'))}")
        for name, c in (e.get("curves") or {}).items():
            lines.append(f"    {name}: first {c['first']:.4g} last {c['last']:.4g} min {c['min']:.4g} "
                         f"max {c['max']:.4g} mean {c['mean']:.4g} ({c['steps']} steps)")
    return "\n".join(lines)


def render_markdown(report: Mapping[str, Any]) -> str:
    """Markdown tables: scores (rows = checkpoints, so columns stay few) and gates per stage."""
    stages, domains, matrix = _shown(report), report["domains"], report["matrix"]
    out = ["| checkpoint | " + " | ".join(domains) + " |", "|---|" + "---:|" * len(domains)]
    for s in stages:
        out.append(f"| {s} | " + " | ".join(_cell_text(report, s, d, matrix[s][d]) for d in domains) + " |")
    if tts_lines(report):
        out += ["", "| checkpoint | domain/mode | greedy | best@k | select@k | selector |", "|---|---|---:|---:|---:|---|"]
        out += [f"| {' | '.join(row)} |" for row in tts_lines(report)]
    out += ["", "| stage | own domain | gain [95% CI], p | no_forgetting | training_signal |", "|---|---|---|---|---|"]
    for e in report["stages"]:
        g = e["gates"]
        for d, lg in _learned_rows(e) if "own_domain" in e else [(None, g.get("learned"))]:
            out.append(f"| {e['stage']} | {d or '–'} | {_learned_text(lg)} | "
                       f"{_forgetting_text(g.get('no_forgetting'))} | {_signal_text(g.get('training_signal'))} |")
    return "\n".join(out)
