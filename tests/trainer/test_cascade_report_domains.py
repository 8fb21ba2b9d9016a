"""A stage that trains several eval domains (Cascade 2's multi_domain): `learned_gates` and the
cascade report on hand-built eval reports where one own domain learned and one did not."""

from __future__ import annotations

import json

import pytest

from trainer.cascade_report import build_report, render_markdown, render_text
from trainer.gates import learned_gates
from trainer.stats import mcnemar_midp

BASE = [1.0] * 30 + [0.0] * 70
STAGES = ["base_model", "sft", "md_rl", "math_rl"]
PARENTS = {"base_model": None, "sft": "base_model", "md_rl": "sft", "math_rl": "md_rl"}


def cells(passes: dict[str, list[float]]) -> dict:
    return {d: {"no_think": {"score": 100 * sum(r) / len(r), "n": len(r), "rows": {f"r{i}": s for i, s in enumerate(r)}}}
            for d, r in passes.items()}


def gained(rows: list[float], gain: int, lose: int = 0) -> list[float]:
    out = list(rows)
    for i in [i for i, s in enumerate(rows) if s == 0][:gain]:
        out[i] = 1.0
    for i in [i for i, s in enumerate(rows) if s == 1][:lose]:
        out[i] = 0.0
    return out


MCQA_AFTER = gained(BASE, 20)
EVALS = {
    "base_model": cells({"mcqa": BASE, "tool_call": BASE, "math": BASE}),
    "sft": cells({"mcqa": BASE, "tool_call": BASE, "math": BASE}),
    "md_rl": cells({"mcqa": MCQA_AFTER, "tool_call": gained(BASE, 1), "math": BASE}),
    "math_rl": cells({"mcqa": gained(MCQA_AFTER, 0, 15), "tool_call": BASE, "math": gained(BASE, 20)}),
}


def test_learned_gates_pass_only_when_every_domain_learned() -> None:
    passed, gates = learned_gates(EVALS["sft"], EVALS["md_rl"], ["mcqa", "tool_call"])
    assert not passed and [g["domain"] for g in gates] == ["mcqa", "tool_call"]
    assert gates[0]["passed"] and gates[0]["p_value"] == pytest.approx(mcnemar_midp(0, 20), abs=1e-4)
    assert not gates[1]["passed"] and gates[1]["status"] == "not_significant"
    assert learned_gates(EVALS["sft"], EVALS["md_rl"], ["mcqa"])[0]
    passed, (g,) = learned_gates(EVALS["sft"], EVALS["md_rl"], [])
    assert passed and g["status"] == "no_eval_domain"


@pytest.fixture
def report() -> dict:
    own = {"md_rl": ["mcqa", "tool_call"], "math_rl": "math"}  # a list, and the older single name
    return build_report(STAGES, PARENTS, own, ["mcqa", "tool_call", "math"], EVALS, {}, tolerance=2.0)


def test_report_keeps_one_verdict_per_own_domain(report) -> None:
    by = {e["stage"]: e for e in report["stages"]}
    md = by["md_rl"]
    assert md["own_domain"] == "mcqa" and md["own_domains"] == ["mcqa", "tool_call"]
    per = md["gates"]["learned_by_domain"]
    assert list(per) == ["mcqa", "tool_call"] and per["mcqa"]["passed"] and not per["tool_call"]["passed"]
    assert md["gates"]["learned"]["passed"] is False and md["gates"]["learned"]["status"] == "not_all_learned"
    math = by["math_rl"]
    assert math["own_domains"] == ["math"] and "learned_by_domain" not in math["gates"]
    assert math["gates"]["learned"]["passed"] and math["gates"]["learned"]["gain"] == pytest.approx(20.0)
    rows = {r["domain"]: r for r in math["gates"]["no_forgetting"]["domains"]}
    assert set(rows) == {"mcqa", "tool_call"}  # every own domain of the earlier stage is guarded
    assert not math["gates"]["no_forgetting"]["passed"] and rows["mcqa"]["best"] == "md_rl"
    json.dumps(report)


def test_renderings_show_every_own_domain(report) -> None:
    text = render_text(report)
    assert "learned mcqa: +20.0" in text and "(learned)" in text
    assert "learned tool_call: +1.0" in text and "(not_significant)" in text
    assert "learned math: +20.0" in text
    md = render_markdown(report)
    assert "| md_rl | mcqa | +20.0" in md and "| md_rl | tool_call | +1.0" in md and "| math_rl | math | +20.0" in md
