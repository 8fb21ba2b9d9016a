"""One run per home, end to end through the `cascade` CLI in separate processes: two runs
started together, a run that waits its turn, two `status` calls on a fresh home, and a kill -9
inside each write window (a checkpoint before its rename, an eval report being written) after
which the next run completes and nothing half-written is trusted.

The lock tests `--select` one cheap source asset of the tiny recipe; the kill test uses a
cut-down tiny recipe (one SFT stage, one eval set) so each run takes well under a minute.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_project.home_lock import BUSY_EXIT_CODE, home_lock, read_holder
from spec.paths import REPO_ROOT

pytestmark = pytest.mark.slow
TINY = str(REPO_ROOT / "recipes" / "tiny.yaml")
CHEAP = "raw_math_prompts"
RECIPE = """\
name: kill_windows
seed: 5
model: {base: tiny}
sources:
  - {name: math_sft, domain: math, path: "${CASCADE_HOME}/samples/math_sft.jsonl", generate: math_sft, limit: 8}
benchmarks:
  - {name: eval_math, path: "${CASCADE_HOME}/samples/eval_math.jsonl", generate: math_eval, domain: math,
     eval_domain: math, eval_limit: 2}
sft_stages:
  - name: sft
    sources: [math_sft]
    max_tokens: 256
    train: {epochs: 1, batch_size: 4, learning_rate: 5.0e-5, max_length: 256, max_steps: 2}
evals:
  max_new_tokens: 8
  modes: [no_think]
  blocking: false
  training_signal_blocking: false
"""


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "CASCADE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(REPO_ROOT), **extra}


def _start(home: Path, *args: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dagster_project.cli", *args], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(home, **extra))


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, err


def _status(home: Path, recipe: str = TINY) -> dict[str, dict]:
    rc, out, err = _finish(_start(home, "status", "--recipe", recipe, "--json"))
    assert rc == 0, err[-3000:]
    return {row["asset"]: row for row in json.loads(out)}


def test_two_runs_started_together_on_a_fresh_home(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    procs = [_start(home, "run", "--recipe", TINY, "--select", CHEAP) for _ in range(2)]
    results = [_finish(p) for p in procs]
    codes = sorted(rc for rc, _, _ in results)
    # One holds the home; the other is refused at once (or, if it reached the lock only after
    # the first had finished, runs after it). Never a traceback, never two writers at once.
    assert codes in ([0, BUSY_EXIT_CODE], [0, 0]), [(rc, err[-3000:]) for rc, _, err in results]
    for (rc, _, err), other in zip(results, reversed(procs)):
        assert "Traceback" not in err, err[-3000:]
        if rc == BUSY_EXIT_CODE:
            assert f"another run (pid {other.pid}, started" in err and f"holds this home {home}" in err
    assert _status(home)[CHEAP]["materialized"]
    if codes == [0, 0]:  # both ran: one after the other, never together
        from assets import MAIN_JOB

        records = _instance(home, monkeypatch).get_run_records()
        records = sorted((r for r in records if r.dagster_run.job_name == MAIN_JOB), key=lambda r: r.start_time)
        assert len(records) == 2 and records[0].end_time <= records[1].start_time


def _instance(home: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    from dagster_project.commands import get_instance

    return get_instance()


def test_wait_queues_behind_the_holder_then_finds_the_home_fresh(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with home_lock(home, "cascade run (the first)"):
        proc = _start(home, "run", "--recipe", TINY, "--select", CHEAP, "--wait")
        try:
            line = proc.stderr.readline()
            assert f"waiting for the run holding {home} (pid {os.getpid()}" in line, line + proc.stderr.read()[-3000:]
            assert proc.poll() is None and not (home / "dagster").exists()
        except BaseException:
            _finish(proc)
            raise
    rc, out, err = _finish(proc)
    assert rc == 0, err[-3000:]
    assert read_holder(home)["pid"] == proc.pid  # it held the home once the first let go
    row = _status(home)[CHEAP]
    assert row["materialized"] and not row["stale"]


def test_two_status_calls_on_a_fresh_home_both_succeed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    results = [_finish(p) for p in [_start(home, "status", "--recipe", TINY, "--json") for _ in range(2)]]
    assert [rc for rc, _, _ in results] == [0, 0], [err[-3000:] for _, _, err in results]
    assert all(CHEAP in {r["asset"] for r in json.loads(out)} for _, out, _ in results)


def _files_mention(folder: Path, needle: bytes) -> list[str]:
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_kill9_in_each_write_window_then_the_next_run_completes(tmp_path: Path, monkeypatch) -> None:
    home, recipe = tmp_path / "home", tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)

    def run(*args: str, kill_at: str | None = None) -> tuple[int, str, str]:
        extra = {"CASCADE_TEST_KILL_AT": kill_at} if kill_at else {}
        return _finish(_start(home, "run", "--recipe", str(recipe), *args, **extra))

    # 1. Killed after the SFT checkpoint is trained and recorded, before its rename.
    rc, _, err = run(kill_at="checkpoint_publish:sft")
    assert rc == -signal.SIGKILL, err[-3000:]
    sft = home / "checkpoints" / "sft"
    (partial,) = sft.glob("*.partial")
    final = sft / partial.name.removesuffix(".partial")
    assert (partial / "model.safetensors").is_file() and (partial / "lineage.json").is_file()
    assert not final.exists(), "a checkpoint must not appear under its version before it is complete"
    weights = (partial / "model.safetensors").read_bytes()

    # 2. The next run publishes it (the partial folder is its resume state) and is killed while
    #    writing the first eval report.
    rc, out, err = run(kill_at="eval_write")
    assert rc == -signal.SIGKILL, err[-3000:]
    assert "marked 1 interrupted run(s) failed" in out
    assert final.is_dir() and not partial.exists() and (final / "model.safetensors").read_bytes() == weights
    record = json.loads((final / "lineage.json").read_text())
    assert record["path"] == f"${{CASCADE_HOME}}/checkpoints/sft/{final.name}"
    assert record["config"]["output_dir"] == record["path"]
    assert not _files_mention(final, b".partial"), "files in the checkpoint must name its final folder"
    (half,) = home.glob("evals/*/.tmp-*")
    assert (half / "eval.json").is_file() and not (half.parent / half.name.split("-")[1]).exists()

    # 3. The next run completes: the leftover is removed, the killed run marked, every eval read.
    rc, out, err = run()
    assert rc == 0, err[-3000:]
    recovered = [line for line in out.splitlines() if "recovered from an interrupted run" in line]
    assert len(recovered) == 1 and "marked 1 interrupted run(s) failed" in recovered[0]
    assert f"removed 1 temporary folder(s) ({half.name})" in recovered[0]
    assert not list(home.glob("*/*/.tmp-*")) and not list(home.glob("checkpoints/*/*.partial"))
    status = _status(home, str(recipe))
    assert all(r["materialized"] and not r["stale"] for r in status.values()), status
    evals = sorted(p for p in home.glob("evals/*/*") if p.is_dir() and p.parent.name != "forgetting_matrix")
    assert [p.parent.name for p in evals] == ["base_model", "sft"]
    assert len(evals) == 2 and all(json.loads((p / "eval.json").read_text()) for p in evals)

    # 4. A half-written eval.json (an older, in-place writer killed mid-write) is re-evaluated.
    (folder,) = [p for p in (home / "evals" / "sft").iterdir() if p.is_dir()]
    report = (folder / "eval.json").read_text()
    (folder / "eval.json").write_text(report[: len(report) // 2])
    rc, out, err = run("--select", "eval_sft")
    assert rc == 0 and "JSONDecodeError" not in err, err[-3000:]
    assert json.loads((folder / "eval.json").read_text()) == json.loads(report)

    import dagster as dg

    runs = _instance(home, monkeypatch).get_runs()
    assert not [r for r in runs if r.status == dg.DagsterRunStatus.STARTED]
    assert sum(r.status == dg.DagsterRunStatus.FAILURE for r in runs) == 2
