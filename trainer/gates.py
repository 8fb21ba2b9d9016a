"""The verdicts that say whether a stage worked: no forgetting, learned, training signal.

What, on eval reports (`{domain: {mode: cell}}` as written by assets.evals, where a cell holds
`score`/`lo`/`hi` in points and `rows` = {row_id: raw score or None}) and on a stage's metrics:

  forgetting_gate   the new checkpoint against the best earlier checkpoint on each earlier domain,
                    paired on the same (mode, row) pairs; fails when the drop is both
                    significant (p < alpha) and larger than the tolerance in points, and does not
                    pass when a cell it needs has no score (`missing`); `forgetting_status` names
                    the verdict: pass, fail, missing, or no_earlier_domain (the first RL stage)
  learned_gate      the stage's own-domain gain against its input checkpoint: gain, interval,
                    p-value; passes when the gain is positive and significant; `learned_gates`
                    runs it on each own domain of a multi-domain stage (passes when all do)
  training_signal   a stage whose rewards had no variance, whose grad norm was 0 on every step or
                    whose loss never moved learned nothing, whatever its evals say; an RL stage
                    whose training log-probs were far from its sampler's trained off-policy

Why a best earlier checkpoint: a domain can be forgotten a little at each of several stages,
each drop within tolerance of its parent; comparing with the best earlier score catches it.
Why significant *and* larger than the tolerance: a significant drop of half a point is not
worth stopping a cascade, and a large drop on 12 rows can be noise.
Reports without per-row scores (older evals) fall back to the unpaired rule
max(tolerance, 2 standard errors of the difference).
Why a missing cell is not a pass: a domain that should have been compared and was not (the new
checkpoint or every earlier one lacks its score) proves nothing; calling it a pass would let
a gate that never ran read as one that held. "No earlier domain" (nothing to compare, the
first RL stage) is a different, genuine pass.

Pure Python (trainer.stats), no Dagster: the asset checks and `cascade report` call the same
functions, so the report shows exactly the verdicts the gates gave.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from spec.train import MAX_LOGPROB_DIFF
from trainer.stats import LEVEL, Comparison, cell, compare

POINTS = 100.0
ALPHA = 0.05
Report = Mapping[str, Mapping[str, Mapping[str, Any]]]


def domain_rows(report: Report, domain: str) -> dict[str, float | None] | None:
    """Raw per-row scores of a domain over all its modes, keyed `mode/row_id`; None without rows."""
    by_mode = report.get(domain) or {}
    if not by_mode or any("rows" not in c for c in by_mode.values()):
        return None
    return {f"{mode}/{rid}": s for mode, c in by_mode.items() for rid, s in c["rows"].items()}


def domain_cell(report: Report, domain: str, level: float = LEVEL) -> dict[str, Any] | None:
    """Score of a domain over its modes, in points, with its interval; None when not evaluated.

    With per-row scores the interval is the cell interval of the pooled rows; without, the mean
    of the mode scores with a normal interval from their standard errors.
    """
    by_mode = {m: c for m, c in (report.get(domain) or {}).items() if c.get("n")}
    if not by_mode:
        return None
    rows = domain_rows({domain: by_mode}, domain)
    if rows is not None:
        c = cell([s for s in rows.values() if s is not None], scale=POINTS, level=level)
        return {"score": c.score, "lo": c.lo, "hi": c.hi, "n": c.n, "method": c.method}
    mean = sum(c["score"] for c in by_mode.values()) / len(by_mode)
    se = math.sqrt(sum(c.get("stderr", 0.0) ** 2 for c in by_mode.values())) / len(by_mode)
    return {"score": mean, "lo": mean - 1.96 * se, "hi": mean + 1.96 * se, "se": se,
            "n": sum(c["n"] for c in by_mode.values()), "method": "normal"}


def compare_domain(old: Report, new: Report, domain: str, level: float = LEVEL, seed: int = 0) -> Comparison | None:
    """Paired comparison new − old on a domain, in points; None when either side lacks row scores."""
    a, b = domain_rows(old, domain), domain_rows(new, domain)
    if a is None or b is None:
        return None
    from trainer.stats import align

    x, y = align(a, b)
    return compare(x, y, scale=POINTS, level=level, seed=seed) if x else None


def _unpaired(old: dict[str, Any], new: dict[str, Any]) -> Comparison:
    diff = new["score"] - old["score"]
    se = math.sqrt(old.get("se", 0.0) ** 2 + new.get("se", 0.0) ** 2)
    from statistics import NormalDist

    p = 2 * (1 - NormalDist().cdf(abs(diff) / se)) if se > 0 else float(diff == 0)
    return Comparison(diff, diff - 1.96 * se, diff + 1.96 * se, p, min(old["n"], new["n"]), "unpaired_normal")


def forgetting_gate(new: Report, earlier: Mapping[str, Report], domains: Sequence[str], tolerance: float,
                    alpha: float = ALPHA) -> tuple[bool, list[dict[str, Any]]]:
    """Compare `new` with the best of the `earlier` checkpoints ({stage: report}, cascade order)
    on each domain; returns (passed, one row per domain).

    A row: domain, best (the earlier stage with the highest score), best_score, score, drop,
    drop interval, p_value, test, significant, margin (tolerance − drop; negative = over) and ok.
    A domain that `new` or every earlier checkpoint lacks is `missing` (`missing_in`: new,
    earlier or both) and not ok: the gate does not pass on a comparison it could not make.
    """
    rows, passed = [], True
    for d in domains:
        scored = [(stage, domain_cell(rep, d)) for stage, rep in earlier.items()]
        scored = [(s, c) for s, c in scored if c is not None]
        mine = domain_cell(new, d)
        if not scored or mine is None:
            where = "both" if not scored and mine is None else "new" if mine is None else "earlier"
            rows.append({"domain": d, "status": "missing", "missing_in": where, "ok": False})
            passed = False
            continue
        best, best_cell = max(scored, key=lambda sc: sc[1]["score"])  # first of equals: the earliest
        cmp = compare_domain(earlier[best], new, d)
        if cmp is None:
            cmp = _unpaired(best_cell, mine)
            significant = -cmp.diff > max(tolerance, 2 * (cmp.hi - cmp.diff) / 1.96)
        else:
            significant = cmp.p_value < alpha
        drop = -cmp.diff
        ok = not (significant and drop > tolerance)
        passed &= ok
        rows.append({"domain": d, "status": "ok" if ok else "forgot", "best": best,
                     "best_score": round(best_cell["score"], 2), "score": round(mine["score"], 2),
                     "drop": round(drop, 2), "drop_lo": round(-cmp.hi, 2), "drop_hi": round(-cmp.lo, 2),
                     "p_value": float(f"{cmp.p_value:.3g}"), "test": cmp.test, "n": cmp.n, "significant": significant,
                     "tolerance": tolerance, "margin": round(tolerance - drop, 2), "ok": ok})
    return passed, rows


def forgetting_status(rows: Sequence[Mapping[str, Any]]) -> str:
    """The one-word verdict of a `forgetting_gate`'s rows: `fail` when a domain forgot,
    else `missing` when a cell it needed had no score, `no_earlier_domain` when there was
    nothing to compare (no earlier RL domain: the first RL stage), else `pass`."""
    statuses = {r.get("status") for r in rows}
    if "forgot" in statuses:
        return "fail"
    if "missing" in statuses:
        return "missing"
    return "pass" if rows else "no_earlier_domain"


def forgetting_severity(status: str, blocking: bool) -> str:
    """Dagster severity of the no_forgetting check for a `forgetting_status`: ERROR when a domain
    forgot; for a `missing` cell ERROR only where the gate blocks (`evals.blocking`: the cascade
    must not go on unchecked), else WARN (reported, not stopping an advisory gate)."""
    return "WARN" if status == "missing" and not blocking else "ERROR"


def learned_gate(parent: Report, child: Report, domain: str | None, alpha: float = ALPHA) -> dict[str, Any]:
    """The own-domain gain of a stage over its input checkpoint: gain (points), interval,
    p-value, and `passed` when the gain is positive and significant (p < alpha)."""
    if not domain:
        return {"domain": None, "status": "no_eval_domain", "passed": True}
    old, new = domain_cell(parent, domain), domain_cell(child, domain)
    if old is None or new is None:
        return {"domain": domain, "status": "missing", "passed": False}
    cmp = compare_domain(parent, child, domain) or _unpaired(old, new)
    passed = cmp.diff > 0 and cmp.p_value < alpha
    return {"domain": domain, "status": "learned" if passed else "not_significant" if cmp.diff > 0 else "no_gain",
            "parent": round(old["score"], 2), "child": round(new["score"], 2), "gain": round(cmp.diff, 2),
            "gain_lo": round(cmp.lo, 2), "gain_hi": round(cmp.hi, 2), "p_value": float(f"{cmp.p_value:.3g}"),
            "test": cmp.test, "n": cmp.n, "alpha": alpha, "margin": round(cmp.lo, 2), "passed": passed}


def learned_gates(parent: Report, child: Report, domains: Sequence[str],
                  alpha: float = ALPHA) -> tuple[bool, list[dict[str, Any]]]:
    """`learned_gate` on each of a stage's own domains (a multi-domain kind trains several);
    returns (passed: every domain learned, one verdict per domain). No domain: one `no_eval_domain` verdict."""
    gates = [learned_gate(parent, child, d, alpha) for d in domains] or [learned_gate(parent, child, None, alpha)]
    return all(g["passed"] for g in gates), gates


def combined_verdict(gates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The `learned` verdict of a stage with several own domains: passes when every domain learned."""
    passed = all(g["passed"] for g in gates)
    return {"domains": [g["domain"] for g in gates], "status": "learned" if passed else "not_all_learned",
            "passed": passed}


def _values(rows: Sequence[Mapping[str, Any]], column: str) -> list[float] | None:
    if not rows or column not in rows[0] and not any(column in r for r in rows):
        return None
    vals = [r.get(column) for r in rows]
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
    return vals or None


def training_signal(rows: Sequence[Mapping[str, Any]], eps: float = 1e-12,
                    max_logprob_diff: float | None = MAX_LOGPROB_DIFF) -> tuple[bool, list[str]]:
    """Whether a stage's metrics (one row per step, trainer.metrics) show it could have learned;
    returns (passed, problems), each problem naming the metric.

    Fails when the rewards had no variance on any step (`reward_std` 0 throughout, RL only),
    the grad norm was 0 on every step, or the loss never moved (same value on every step of a
    stage with at least two steps), or (RL) the training forward was not scoring the sampled
    policy: the mean over steps of `rollout_logprob_diff_mean` (steps with no trained token,
    NaN, left out) above `max_logprob_diff` (None: not checked). The mean over steps, not any
    step: one step's noise should not stop a cascade, and a broken setup (wrong temperature,
    weights not synced to the sampler) shows on every step.
    """
    if not rows:
        return False, ["no metrics were recorded"]
    problems = []
    std = _values(rows, "reward_std")
    if std is not None and all(abs(v) <= eps for v in std):
        problems.append(f"rewards had no variance: reward_std 0 on all {len(std)} steps")
    grad = _values(rows, "grad_norm")
    if grad is not None and all(abs(v) <= eps for v in grad):
        problems.append(f"grad norm 0 on every step ({len(grad)} steps)")
    loss = _values(rows, "loss")
    if loss is not None and len(loss) > 1 and max(loss) - min(loss) <= eps:
        problems.append(f"loss never moved: {loss[0]:.6g} on all {len(loss)} steps")
    gap = _values(rows, "rollout_logprob_diff_mean")
    if gap is not None and max_logprob_diff is not None and sum(gap) / len(gap) > max_logprob_diff:
        problems.append(f"training log-probs are not the sampler's: rollout_logprob_diff_mean "
                        f"{sum(gap) / len(gap):.3g} (mean of {len(gap)} steps) > {max_logprob_diff:g}")
    return not problems, problems


CURVE_METRICS = ("loss", "reward_mean", "reward_std", "grad_norm", "kl", "entropy", "rollout_logprob_diff_mean",
                 "rollout_logprob_diff_max")


def curve_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """first / last / min / max / mean of each training-curve metric a stage recorded."""
    out = {}
    for name in CURVE_METRICS:
        vals = _values(rows, name)
        if vals:
            out[name] = {"first": vals[0], "last": vals[-1], "min": min(vals), "max": max(vals),
                         "mean": sum(vals) / len(vals), "steps": len(vals)}
    return out
