"""The cascade report: built from hand-made eval reports and metrics, rendered, and `cascade report`
on a home where nothing ran (every cell missing, never 0)."""

from __future__ import annotations

import json

import pytest

from trainer.cascade_report import build_report, render_markdown, render_text
from trainer.stats import mcnemar_midp

STAGES = ["base_model", "sft", "math_rl", "code_rl"]
PARENTS = {"base_model": None, "sft": "base_model", "math_rl": "sft", "code_rl": "math_rl"}
OWN = {"math_rl": "math", "code_rl": "code"}


def cells(passes: dict[str, list[float]]) -> dict:
    out = {}
    for domain, rows in passes.items():
        out[domain] = {m: {"score": 100 * sum(rows) / len(rows), "n": len(rows),
                           "rows": {f"r{i}": s for i, s in enumerate(rows)}} for m in ("think", "no_think")}
    return out


def flip(rows: list[float], lose: int, gain: int) -> list[float]:
    out = list(rows)
    ones = [i for i, s in enumerate(rows) if s == 1][:lose]
    zeros = [i for i, s in enumerate(rows) if s == 0][:gain]
    for i in ones:
        out[i] = 0.0
    for i in zeros:
        out[i] = 1.0
    return out


BASE = [1.0] * 30 + [0.0] * 70


@pytest.fixture
def report() -> dict:
    math_after = flip(BASE, 0, 20)
    evals = {
        "base_model": cells({"math": BASE, "code": BASE}),
        "sft": cells({"math": BASE, "code": BASE}),
        "math_rl": cells({"math": math_after, "code": BASE}),
        "code_rl": cells({"math": flip(math_after, 15, 0), "code": flip(BASE, 0, 1)}),
    }
    metrics = {"sft": [{"step": 0, "loss": 2.0, "grad_norm": 1.0}, {"step": 1, "loss": 1.5, "grad_norm": 1.0}],
               "math_rl": [{"step": i, "loss": 0.1 * i, "reward_std": 0.3, "grad_norm": 0.5} for i in range(3)],
               "code_rl": [{"step": i, "loss": 0.0, "reward_std": 0.0, "grad_norm": 0.0} for i in range(3)]}
    return build_report(STAGES, PARENTS, OWN, ["math", "code", "rm"], evals, metrics, tolerance=2.0)


def test_matrix_has_intervals_per_mode_and_missing_domains(report):
    m = report["matrix"]
    assert m["math_rl"]["math"]["score"] == pytest.approx(50.0)
    assert m["math_rl"]["math"]["lo"] < 50 < m["math_rl"]["math"]["hi"]
    assert set(m["math_rl"]["math"]["modes"]) == {"think", "no_think"}
    assert m["base_model"]["rm"] is None  # never evaluated: missing, not 0


def test_stage_verdicts(report):
    by = {e["stage"]: e for e in report["stages"]}
    assert set(by) == {"sft", "math_rl", "code_rl"}
    learned = by["math_rl"]["gates"]["learned"]
    assert learned["passed"] and learned["gain"] == pytest.approx(20.0)
    assert learned["p_value"] == pytest.approx(mcnemar_midp(0, 40), abs=1e-4)  # 20 rows × 2 modes
    forgetting = by["code_rl"]["gates"]["no_forgetting"]
    (row,) = forgetting["domains"]
    assert not forgetting["passed"] and row["domain"] == "math" and row["best"] == "math_rl"
    assert row["drop"] == pytest.approx(15.0) and row["margin"] == pytest.approx(-13.0)
    assert by["code_rl"]["gates"]["learned"]["status"] == "not_significant"
    signal = by["code_rl"]["gates"]["training_signal"]
    assert not signal["passed"] and len(signal["problems"]) == 3
    assert by["sft"]["gates"]["training_signal"]["passed"] and "learned" not in by["sft"]["gates"]
    assert by["math_rl"]["curves"]["loss"]["last"] == pytest.approx(0.2)
    json.dumps(report)  # JSON-able as written by --json


def test_renderings(report):
    text = render_text(report)
    assert "math/no_think" in text and "missing" in text and "FAIL" in text and "p=" in text
    md = render_markdown(report)
    header = md.splitlines()[0]
    assert header == "| checkpoint | math | code | rm |"  # checkpoints are rows: every column is there
    assert all(line.count("|") == header.count("|") for line in md.splitlines()[:6] if line.startswith("|"))
    assert "| code_rl | code |" in md


def test_scoped_cells_read_not_evaluated_and_tts_is_reported():
    """`evals.scope: gates` skips cells on purpose: they read "not evaluated", a checkpoint with none
    is left out of the table, and a domain that should have a score but has none stays "missing"."""
    evals = {"sft": cells({"math": BASE}), "math_rl": cells({"math": BASE})}
    tts = {"k": 4, "select": "majority", "best_at_k": {"score": 55.0, "lo": 45.0, "hi": 64.0, "n": 100},
           "select_at_k": {"score": 41.0, "lo": 32.0, "hi": 51.0, "n": 100}}
    evals["math_rl"]["math"]["no_think"]["tts"] = tts
    planned = {"sft": ["math"], "math_rl": ["math", "code"], "code_rl": ["math", "code"]}
    rep = build_report(STAGES, PARENTS, OWN, ["math", "code"], evals, {}, tolerance=2.0, planned=planned)
    assert rep["not_evaluated"] == {"base_model": ["math", "code"], "sft": ["code"]}
    md = render_markdown(rep)
    assert "| base_model |" not in md and "| sft | 30.0 [" in md and "not evaluated" in md
    assert "| math_rl | " in md and "missing" in md  # math_rl's code cell was planned but never came
    assert "| math_rl | math/no_think | 30.0 [" in md and "| 55.0 [45.0, 64.0] | 41.0 [32.0, 51.0] | majority, k=4 |" in md
    text = render_text(rep)
    assert "Test-time scaling" in text and "math_rl math/no_think" in text
    assert rep["matrix"]["math_rl"]["math"]["modes"]["no_think"]["tts"]["select_at_k"]["score"] == 41.0


def test_domain_panels_plot(report):
    from assets.plots import domain_panels_markdown

    assert domain_panels_markdown(report).startswith("![held-out score per domain](data:image/png;base64,")


def test_cascade_report_command_on_empty_home(tmp_path, monkeypatch, capsys):
    from dagster_project.cli import main
    from spec.paths import REPO_ROOT

    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    out = tmp_path / "report.json"
    assert main(["report", "--recipe", str(REPO_ROOT / "recipes" / "tiny.yaml"), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["checkpoints"][0] == "base_model" and "math" in data["domains"]
    assert all(c is None for by in data["matrix"].values() for c in by.values())
    assert "missing" in capsys.readouterr().out
