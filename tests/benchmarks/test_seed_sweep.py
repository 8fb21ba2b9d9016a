"""benchmarks/seed_sweep.py: the summary's counting (fast, on hand-made reports) and a real sweep of
recipes/tiny.yaml over 2 seeds (slow): per RL stage 2 per-seed gains, every gate's verdicts, the seed
really applied (different generated data per home), and a second invocation that reuses the finished
homes; and (fast, the cascade replaced by a recorder) which homes are reused and which resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "seed_sweep.py"
TINY_RL_STAGES = ["rlhf", "if_rl", "math_rl", "code_rl", "swe_rl"]
SEEDS = (1234, 5678)


@pytest.fixture(scope="module")
def sweep():
    return load_script(SCRIPT)


def _stage(name, domain, status, gain, p, forgetting):
    return {"stage": name, "parent": "x", "own_domain": domain, "own_domains": [domain],
            "gates": {"learned": {"domain": domain, "status": status, "gain": gain, "p_value": p,
                                  "passed": status == "learned"},
                      "no_forgetting": {"status": forgetting, "domains": [
                          {"domain": "rm", "status": "forgot" if forgetting == "fail" else "ok",
                           "drop": 9.0 if forgetting == "fail" else 1.0, "p_value": 0.01, "best": "rlhf",
                           "margin": -7.0 if forgetting == "fail" else 1.0}]}}}


def test_claims_hold_only_in_every_seed(sweep):
    reports = {
        1: {"alpha": 0.05, "stages": [{"stage": "sft_stage2", "parent": "sft_stage1", "gates": {}},  # no own domain
                                      _stage("code_rl", "code", "learned", 10.0, 0.001, "pass"),
                                      _stage("math_rl", "math", "learned", 4.0, 0.01, "fail")]},
        2: {"alpha": 0.05, "stages": [_stage("code_rl", "code", "learned", 6.0, 0.02, "pass"),
                                      _stage("math_rl", "math", "not_significant", 1.0, 0.4, "pass")]},
    }
    runs = {1: {"attempts": [{"wall_s": 10.0}, {"wall_s": 5.5}], "finished": True},
            2: {"attempts": [], "finished": False}}
    s = sweep.summarize(reports, runs, [1, 2])
    assert s["complete"] and list(s["rl_stages"]) == ["code_rl", "math_rl"]
    code = s["rl_stages"]["code_rl"]
    assert code["by_domain"]["code"]["gain"] == {"1": 10.0, "2": 6.0}
    row = code["by_domain"]["code"]
    assert (row["mean"], row["min"], row["max"]) == (8.0, 6.0, 10.0)
    assert code["learned_seeds"] == 2 and code["holds"]
    math = s["rl_stages"]["math_rl"]
    assert math["learned_seeds"] == 1 and not math["holds"]
    gate = s["no_forgetting"]["math_rl"]
    assert gate["status"] == {"1": "fail", "2": "pass"} and gate["failed_seeds"] == 1 and not gate["holds"]
    assert gate["worst"]["1"]["domain"] == "rm" and gate["worst"]["1"]["drop"] == 9.0
    assert s["no_forgetting"]["code_rl"]["holds"]
    assert s["runs"]["1"]["wall_s"] == 15.5 and s["runs"]["1"]["attempts"] == 2
    assert any("math_rl learns math significantly in 1/2 seeds" in c for c in sweep.claims(s))
    # a seed without a report: nothing holds, even what passed in every reported seed
    partial = sweep.summarize({1: reports[1], 2: None}, runs, [1, 2])
    assert not partial["complete"] and not partial["rl_stages"]["code_rl"]["holds"]
    assert partial["rl_stages"]["code_rl"]["by_domain"]["code"]["gain"] == {"1": 10.0}
    assert "no claim holds yet" in sweep.render(partial)


def test_finished_homes_are_reused_and_others_resumed_with_stale(sweep, tmp_path, monkeypatch):
    calls = []

    def fake_cascade(args, home, log):
        calls.append((home.name, args[0], "--stale" in args))
        if args[0] == "report":
            (home / sweep.REPORT).write_text("{}")
        return 0

    monkeypatch.setattr(sweep, "_cascade", fake_cascade)
    recipe = ROOT / "recipes" / "tiny.yaml"
    first = sweep.run_seed(recipe, 7, tmp_path / "7")
    assert calls == [("7", "run", True), ("7", "report", False)]
    assert first["finished"] and not first["reused"] and len(first["attempts"]) == 1
    assert sweep.run_seed(recipe, 7, tmp_path / "7")["reused"] and len(calls) == 2  # finished: nothing runs
    record = json.loads((tmp_path / "7" / sweep.RUN_RECORD).read_text())  # a sweep stopped before the finish
    (tmp_path / "7" / sweep.RUN_RECORD).write_text(json.dumps({**record, "finished": False}))
    again = sweep.run_seed(recipe, 7, tmp_path / "7")
    assert calls[2:] == [("7", "run", True), ("7", "report", False)] and len(again["attempts"]) == 2
    failed = tmp_path / "8"  # a run that exits non-zero is not finished: the next sweep resumes it
    monkeypatch.setattr(sweep, "_cascade",
                        lambda args, home, log: 1 if args[0] == "run" else fake_cascade(args, home, log))
    assert not sweep.run_seed(recipe, 8, failed)["finished"] and not sweep.finished(failed)


def _sweep(tmp_path: Path, *extra: str) -> dict:
    env = {**os.environ, "CASCADE_HOME": str(tmp_path / "parent_home")}
    cmd = [sys.executable, str(SCRIPT), "--recipe", str(ROOT / "recipes" / "tiny.yaml"),
           "--homes", str(tmp_path / "homes"), "--out", str(tmp_path / "summary.json"), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Claims:" in proc.stdout
    return json.loads((tmp_path / "summary.json").read_text())


def _checkpoint_mtimes(homes: Path) -> dict[str, int]:
    files = [p for seed in SEEDS for p in (homes / str(seed) / "checkpoints").rglob("*") if p.is_file()]
    return {str(p): p.stat().st_mtime_ns for p in files}


@pytest.mark.slow  # two whole tiny cascades: several minutes on 2 cores
def test_tiny_sweep_reports_every_stage_per_seed_and_reuses_homes(tmp_path: Path) -> None:
    seeds = [str(s) for s in SEEDS]
    first = _sweep(tmp_path, "--seeds", *seeds)
    homes = tmp_path / "homes"
    assert first["complete"] and first["reported_seeds"] == list(SEEDS)
    assert list(first["rl_stages"]) == TINY_RL_STAGES and list(first["no_forgetting"]) == TINY_RL_STAGES
    for name, stage in first["rl_stages"].items():
        report = {s: json.loads((homes / s / "seed_sweep_report.json").read_text()) for s in seeds}
        for domain, row in stage["by_domain"].items():
            assert sorted(row["gain"]) == seeds and all(isinstance(g, (int, float)) for g in row["gain"].values())
            for s in seeds:  # the gain is the seed's own report's, not another seed's
                entry = next(e for e in report[s]["stages"] if e["stage"] == name)
                assert row["gain"][s] == entry["gates"]["learned"]["gain"]
            assert row["learned_seeds"] == sum(v == "learned" for v in row["status"].values())
        gate = first["no_forgetting"][name]
        assert sorted(gate["status"]) == seeds
        assert set(gate["status"].values()) <= {"pass", "fail", "missing", "no_earlier_domain"}
        assert gate["failed_seeds"] == sum(v == "fail" for v in gate["status"].values())
    assert set(first["no_forgetting"]["rlhf"]["status"].values()) == {"no_earlier_domain"}
    for s in seeds:
        assert first["runs"][s] == {**first["runs"][s], "attempts": 1, "finished": True, "reused": False}
        assert first["runs"][s]["wall_s"] > 0
    # the seed reached the data: each home generated its own held-out rows
    evals = [(homes / s / "samples" / "eval_math.jsonl").read_bytes() for s in seeds]
    assert evals[0] != evals[1]

    before = _checkpoint_mtimes(homes)
    assert before
    second = _sweep(tmp_path, "--seeds", *seeds)
    assert all(second["runs"][s]["reused"] and second["runs"][s]["attempts"] == 1 for s in seeds)
    assert (second["rl_stages"], second["no_forgetting"]) == (first["rl_stages"], first["no_forgetting"])
    assert _checkpoint_mtimes(homes) == before

    only = _sweep(tmp_path, "--summary-only")  # the seeds are the homes found
    assert only["seeds"] == list(SEEDS) and only["rl_stages"] == first["rl_stages"]
