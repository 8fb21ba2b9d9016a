"""trainer.gates on hand-made eval reports and metrics tables (known p-values)."""

from __future__ import annotations

import pytest

from trainer.cascade_report import build_report, render_markdown, render_text
from trainer.gates import (curve_summary, domain_cell, forgetting_gate, forgetting_severity, forgetting_status,
                           learned_gate, training_signal)
from trainer.stats import mcnemar_midp


def report(domain: str, passes: list[float], mode: str = "no_think") -> dict:
    """An eval report of one domain/mode from per-row raw scores (row ids r0, r1, ...)."""
    n = len(passes)
    return {domain: {mode: {"score": 100 * sum(passes) / n, "n": n,
                            "rows": {f"r{i}": s for i, s in enumerate(passes)}}}}


def flips(base: list[float], lose: int, gain: int) -> list[float]:
    """`base` with the first `lose` passing rows failed and the first `gain` failing rows passed."""
    out, lost, won = list(base), 0, 0
    for i, s in enumerate(base):
        if s == 1 and lost < lose:
            out[i], lost = 0.0, lost + 1
        elif s == 0 and won < gain:
            out[i], won = 1.0, won + 1
    return out


BASE = [1.0] * 50 + [0.0] * 50


def test_forgetting_compares_with_best_earlier_and_blocks_significant_large_drop():
    best = flips(BASE, 0, 10)  # 60 %
    earlier = {"sft": report("math", BASE), "math_rl": report("math", best), "if_rl": report("math", flips(best, 5, 0))}
    new = report("math", flips(best, 12, 1))  # 49 %: 12 lost, 1 gained vs the best (math_rl)
    passed, rows = forgetting_gate(new, earlier, ["math"], tolerance=2.0)
    (row,) = rows
    assert not passed and row["best"] == "math_rl" and row["status"] == "forgot"
    assert row["drop"] == pytest.approx(11.0)
    assert row["p_value"] == pytest.approx(mcnemar_midp(12, 1), abs=1e-4)
    assert row["significant"] and row["margin"] == pytest.approx(-9.0)
    assert row["drop_lo"] < 11 < row["drop_hi"]


def test_forgetting_tolerates_small_or_insignificant_drops():
    earlier = {"a": report("math", BASE)}
    # Significant but within tolerance: 3 lost, none gained is p=0.25 (not significant) -> make it larger n.
    big = [1.0] * 500 + [0.0] * 500
    passed, rows = forgetting_gate(report("math", flips(big, 15, 0)), {"a": report("math", big)}, ["math"], tolerance=2.0)
    assert rows[0]["significant"] and rows[0]["drop"] == pytest.approx(1.5) and passed
    # Larger than tolerance but not significant (2 of 8 rows lost).
    small = [1.0] * 4 + [0.0] * 4
    passed, rows = forgetting_gate(report("math", flips(small, 2, 0)), {"a": report("math", small)}, ["math"], 2.0)
    assert passed and rows[0]["drop"] == pytest.approx(25.0) and not rows[0]["significant"]
    # Same answers: no drop at all.
    passed, rows = forgetting_gate(report("math", BASE), earlier, ["math"], 2.0)
    assert passed and rows[0]["p_value"] == 1.0


def test_forgetting_missing_cell_is_missing_never_a_pass():
    # code: no score in the new checkpoint; math: none in any earlier one
    passed, rows = forgetting_gate(report("math", BASE), {"a": report("code", BASE)}, ["code", "math"], 2.0)
    assert not passed and [r["status"] for r in rows] == ["missing", "missing"]
    assert [r["missing_in"] for r in rows] == ["new", "earlier"] and not any(r["ok"] for r in rows)
    assert forgetting_status(rows) == "missing"
    # one domain compared and held, another missing: still not a pass
    both = {"a": {**report("math", BASE), **report("code", BASE)}}
    passed, rows = forgetting_gate(report("math", BASE), both, ["math", "code"], 2.0)
    assert not passed and [r["status"] for r in rows] == ["ok", "missing"] and forgetting_status(rows) == "missing"
    # a cell with no scored rows (n = 0) is missing too
    empty = {"math": {"no_think": {"score": 0.0, "n": 0, "rows": {}}}}
    passed, rows = forgetting_gate(empty, {"a": report("math", BASE)}, ["math"], 2.0)
    assert not passed and rows[0]["missing_in"] == "new"


def test_forgetting_status_keeps_no_earlier_domain_apart_from_missing():
    passed, rows = forgetting_gate(report("math", BASE), {"a": report("math", BASE)}, [], 2.0)
    assert passed and rows == [] and forgetting_status(rows) == "no_earlier_domain"
    passed, rows = forgetting_gate(report("math", BASE), {"a": report("math", BASE)}, ["math"], 2.0)
    assert passed and forgetting_status(rows) == "pass"
    forgot = forgetting_gate(report("math", flips(BASE, 30, 0)), {"a": report("math", BASE)}, ["math", "code"], 2.0)
    assert not forgot[0] and forgetting_status(forgot[1]) == "fail"  # forgetting outranks a missing cell


@pytest.mark.parametrize("status,blocking,severity", [
    ("fail", False, "ERROR"), ("fail", True, "ERROR"),
    ("missing", False, "WARN"),  # advisory gate (the default recipe's evals.blocking: false): reported
    ("missing", True, "ERROR"),  # blocking gate: a comparison it could not make stops the cascade
])
def test_missing_cell_severity_follows_the_blocking_setting(status: str, blocking: bool, severity: str):
    import dagster as dg

    assert forgetting_severity(status, blocking) == severity
    assert dg.AssetCheckSeverity[forgetting_severity(status, blocking)].value == severity  # what assets.evals passes


def _cascade(evals: dict) -> dict:
    stages = ["sft", "rlhf", "if_rl", "math_rl"]
    parents = {"sft": None, "rlhf": "sft", "if_rl": "rlhf", "math_rl": "if_rl"}
    own = {"rlhf": "rm", "if_rl": "ifeval", "math_rl": "math"}
    return build_report(stages, parents, own, ["rm", "ifeval", "math"], evals, {}, tolerance=2.0)


def test_report_says_missing_not_pass_and_keeps_no_earlier_domain():
    full = {**report("rm", BASE), **report("ifeval", BASE), **report("math", BASE)}
    evals = {"sft": full, "rlhf": full, "if_rl": {**report("ifeval", BASE), **report("math", BASE)}, "math_rl": None}
    rep = _cascade(evals)
    by = {e["stage"]: e["gates"]["no_forgetting"] for e in rep["stages"]}
    assert by["rlhf"]["status"] == "no_earlier_domain" and by["rlhf"]["passed"]
    assert by["if_rl"]["status"] == "missing" and not by["if_rl"]["passed"]  # its rm cell never came
    assert by["math_rl"]["status"] == "missing" and not by["math_rl"]["passed"]  # not evaluated at all
    assert [r["missing_in"] for r in by["math_rl"]["domains"]] == ["new", "new"]
    md = render_markdown(rep)
    assert "| rlhf | rm |" in md and "pass (no earlier domain)" in md
    assert "p=1 (no_gain) | missing (rm) |" in md  # if_rl's own domain compared; its rm cell missing
    assert "| math_rl | math | missing | missing (rm, ifeval) |" in md
    text = render_text(rep)
    assert "no_forgetting: missing (rm)" in text and "no_forgetting: pass (no earlier domain)" in text
    assert "no_forgetting: pass" not in text.replace("no_forgetting: pass (no earlier domain)", "")
    # with every cell present: compared and passed, with the worst margin
    evals["if_rl"], evals["math_rl"] = full, full
    text = render_text(_cascade(evals))
    assert "no_forgetting: pass (worst: rm drop -0.0 vs sft, p=1, margin +2.0)" in text and "missing" not in text


def test_forgetting_pairs_rows_by_id_over_modes():
    old = {"math": {m: report("math", BASE, m)["math"][m] for m in ("think", "no_think")}}
    new_think = flips(BASE, 20, 0)
    new = {"math": {"think": report("math", new_think, "think")["math"]["think"],
                    "no_think": report("math", BASE, "no_think")["math"]["no_think"]}}
    passed, rows = forgetting_gate(new, {"a": old}, ["math"], 2.0)
    assert not passed and rows[0]["n"] == 200 and rows[0]["drop"] == pytest.approx(10.0)
    assert rows[0]["p_value"] == pytest.approx(mcnemar_midp(20, 0), abs=1e-4)


def test_forgetting_falls_back_to_unpaired_without_rows():
    old = {"math": {"no_think": {"score": 50.0, "stderr": 5.0, "n": 100}}}
    passed, rows = forgetting_gate({"math": {"no_think": {"score": 42.0, "stderr": 5.0, "n": 100}}}, {"a": old}, ["math"], 2.0)
    assert passed and rows[0]["test"] == "unpaired_normal"  # 8 < 2 * sqrt(50) = 14.1
    passed, _ = forgetting_gate({"math": {"no_think": {"score": 30.0, "stderr": 5.0, "n": 100}}}, {"a": old}, ["math"], 2.0)
    assert not passed


def test_learned_gain_with_known_p_value():
    parent = report("code", BASE)
    child = report("code", flips(BASE, 2, 12))
    g = learned_gate(parent, child, "code")
    assert g["passed"] and g["status"] == "learned"
    assert g["gain"] == pytest.approx(10.0) and g["p_value"] == pytest.approx(mcnemar_midp(2, 12), abs=1e-4)
    assert g["gain_lo"] < 10 < g["gain_hi"]
    weak = learned_gate(parent, report("code", flips(BASE, 1, 2)), "code")
    assert not weak["passed"] and weak["status"] == "not_significant"
    worse = learned_gate(parent, report("code", flips(BASE, 3, 0)), "code")
    assert worse["status"] == "no_gain" and not worse["passed"]
    assert learned_gate(parent, {}, "code")["status"] == "missing"


def test_learned_continuous_scores_use_paired_bootstrap():
    old = [0.1 * (i % 10) for i in range(100)]
    g = learned_gate(report("swe", old), report("swe", [v + 0.05 for v in old]), "swe")
    assert g["test"] == "paired_bootstrap" and g["gain"] == pytest.approx(5.0) and g["passed"]


def test_domain_cell_interval():
    c = domain_cell(report("math", BASE), "math")
    assert c["method"] == "wilson" and c["score"] == 50.0 and c["lo"] < 50 < c["hi"]
    assert domain_cell(report("math", BASE), "code") is None


def test_training_signal_names_each_problem():
    healthy = [{"step": i, "loss": 0.1 * i, "reward_std": 0.2, "grad_norm": 1.0} for i in range(3)]
    assert training_signal(healthy) == (True, [])
    dead = [{"step": i, "loss": 0.0, "reward_mean": 0.0, "reward_std": 0.0, "grad_norm": 0.0} for i in range(4)]
    ok, problems = training_signal(dead)
    assert not ok and len(problems) == 3
    assert any("reward" in p for p in problems) and any("grad norm" in p for p in problems)
    assert any("loss never moved" in p for p in problems)
    ok, problems = training_signal([{"step": i, "loss": 1.0 - 0.1 * i, "grad_norm": 0.0} for i in range(3)])
    assert not ok and problems == ["grad norm 0 on every step (3 steps)"]
    sft = [{"step": i, "loss": 2.0 - i, "grad_norm": 3.0} for i in range(2)]  # no reward columns
    assert training_signal(sft) == (True, [])
    assert training_signal([])[0] is False


def test_curve_summary():
    rows = [{"step": i, "loss": float(3 - i), "reward_mean": 0.1 * i} for i in range(3)]
    s = curve_summary(rows)
    assert s["loss"] == {"first": 3.0, "last": 1.0, "min": 1.0, "max": 3.0, "mean": 2.0, "steps": 3}
    assert s["reward_mean"]["last"] == pytest.approx(0.2) and "grad_norm" not in s
