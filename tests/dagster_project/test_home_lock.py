"""One run per home: the home lock (busy, --wait, released by a kill -9), a safe first start of
the Dagster instance under concurrent commands, recovery of what a killed run left, and the
atomic-publish helpers (assets.publish) that keep half-written folders from being trusted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assets.publish import clean_leftovers, partial_folder, publish, retarget, temp_folder
from dagster_project.cli import main
from dagster_project.home_lock import BUSY_EXIT_CODE, HomeBusy, home_lock, read_holder
from spec.paths import REPO_ROOT

TINY = str(REPO_ROOT / "recipes" / "tiny.yaml")
HOLD = """
import sys, time
from pathlib import Path
from dagster_project.home_lock import home_lock
with home_lock(Path(sys.argv[1]), "holder", wait=len(sys.argv) > 2,
               on_wait=lambda h: print("waiting for", h.get("pid"), flush=True)):
    print("held", flush=True)
    time.sleep(3600 if len(sys.argv) == 2 else 0)
"""


def _child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD, *args], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    return tmp_path / "home"


def test_second_holder_is_refused_with_the_holders_details(home: Path) -> None:
    with home_lock(home, "cascade run --recipe first") as record:
        assert read_holder(home) == record and record["pid"] == os.getpid()
        with pytest.raises(HomeBusy) as busy:
            with home_lock(home, "cascade run --recipe second"):
                pass
    message = str(busy.value)
    assert f"pid {os.getpid()}" in message and record["started"] in message and str(home) in message
    assert "cascade run --recipe first" in message
    with home_lock(home, "third"):  # released at the end of the block
        pass


def test_cascade_run_exits_3_at_once_while_another_run_holds_the_home(home: Path, capsys) -> None:
    with home_lock(home, "cascade run (the other one)"):
        assert main(["run", "--recipe", TINY, "--select", "raw_math_prompts"]) == BUSY_EXIT_CODE
    err = capsys.readouterr().err
    assert f"another run (pid {os.getpid()}, started" in err and f"holds this home {home}" in err
    assert "Traceback" not in err
    assert not (home / "dagster").exists(), "the refused run must not touch the instance"


def test_a_killed_holder_leaves_no_stale_lock(home: Path) -> None:
    proc = _child(str(home))
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(HomeBusy, match=f"pid {proc.pid}"):
            with home_lock(home, "second"):
                pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        with home_lock(home, "after the kill") as record:  # the kernel released it
            assert record["pid"] == os.getpid()
    finally:
        _stop(proc)


def test_wait_queues_behind_the_holder(home: Path) -> None:
    with home_lock(home, "first"):
        proc = _child(str(home), "--wait")
        try:
            assert proc.stdout.readline().strip() == f"waiting for {os.getpid()}"
            assert proc.poll() is None
        except BaseException:
            _stop(proc)
            raise
    try:
        assert proc.stdout.readline().strip() == "held"
        assert proc.wait(timeout=120) == 0
    finally:
        _stop(proc)


RACE = """
import sys, time
from pathlib import Path
import dagster  # imported before the barrier: every process opens the instance at the same moment
from dagster_project.commands import get_instance
Path(sys.argv[1] + ".ready").touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.002)
print(len(get_instance().get_runs()))
"""


def test_concurrent_first_opens_of_the_instance_all_succeed(home: Path, tmp_path: Path) -> None:
    """Without the instance lock, these collide on `table runs already exists` / alembic_version."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path / f"p{i}"), str(go)], cwd=REPO_ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}) for i in range(4)]
    try:
        while not all((tmp_path / f"p{i}.ready").exists() for i in range(4)):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.05)
        go.touch()
        results = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            _stop(p)
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in results]
    assert [out.strip() for out, _ in results] == ["0"] * 4
    text = (home / "dagster" / "dagster.yaml").read_text()
    assert text.count("telemetry:") == 1 and text.count("nux:") == 1


def test_recover_marks_only_dead_cascade_runs_and_removes_temp_folders(home: Path) -> None:
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from dagster_project.commands import get_instance
    from dagster_project.home_lock import HOST_TAG, PID_TAG, recover_home, run_tags

    instance = get_instance()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        runs = {name: DagsterRun(job_name="cascade", run_id=f"{name}-run", status=dg.DagsterRunStatus.STARTED,
                                 tags=tags)
                for name, tags in {"dead": run_tags() | {PID_TAG: str(gone.pid)},
                                   "alive": run_tags() | {PID_TAG: str(alive.pid)},
                                   "ui": {}, "other_host": {PID_TAG: str(gone.pid), HOST_TAG: "elsewhere"}}.items()}
        for run in runs.values():
            instance.add_run(run)
        (home / "data" / "raw_x" / ".tmp-abc-1234").mkdir(parents=True)
        (home / "evals" / "eval_x" / ".tmp-def-5678").mkdir(parents=True)
        keep = home / "checkpoints" / "sft" / "v1.partial"
        keep.mkdir(parents=True)
        line = recover_home(instance, home)
        status = {name: instance.get_run_by_id(run.run_id).status for name, run in runs.items()}
    finally:
        _stop(alive)
    assert status == {"dead": dg.DagsterRunStatus.FAILURE, "alive": dg.DagsterRunStatus.STARTED,
                      "ui": dg.DagsterRunStatus.STARTED, "other_host": dg.DagsterRunStatus.STARTED}
    # Runs still in progress (alive, or not cascade's to judge) may be writing: nothing removed yet.
    assert line == "cascade run: recovered from an interrupted run: marked 1 interrupted run(s) failed (dead-run)"
    assert len(list(home.glob("*/*/.tmp-*"))) == 2
    for name in ("ui", "other_host"):
        instance.report_run_canceled(instance.get_run_by_id(runs[name].run_id))
    # The `alive` process is gone now: marked, and with nothing running the leftovers go.
    line = recover_home(instance, home)
    assert line is not None and "\n" not in line
    assert "marked 1 interrupted run(s) failed (alive-ru)" in line and "removed 2 temporary folder(s)" in line
    assert keep.is_dir() and not list(home.glob("*/*/.tmp-*"))
    assert recover_home(instance, home) is None


def test_publish_renames_whole_folders_and_never_keeps_an_unrecorded_one(tmp_path: Path) -> None:
    final = tmp_path / "evals" / "eval_x" / "v1"
    final.mkdir(parents=True)
    (final / "eval.json").write_text('{"math": ')  # an older in-place writer cut short: no record
    tmp = temp_folder(final)
    assert tmp.parent == final.parent and tmp.name.startswith(".tmp-v1-")
    (tmp / "eval.json").write_text("{}")
    (tmp / "lineage.json").write_text("{}")
    assert publish(tmp, final) == final and not tmp.exists()
    assert (final / "eval.json").read_text() == "{}"
    again = temp_folder(final)  # the same version published meanwhile: the published one stays
    (again / "eval.json").write_text('{"other": 1}')
    assert publish(again, final) == final and not again.exists()
    assert (final / "eval.json").read_text() == "{}"
    set_aside = list(final.parent.glob(".tmp-*"))  # the unrecorded folder, out of the way
    assert len(set_aside) == 1 and (set_aside[0] / "eval.json").read_text() == '{"math": '
    assert clean_leftovers(tmp_path) == set_aside
    assert sorted(p.name for p in final.parent.iterdir()) == ["v1"]


def test_partial_folder_keeps_resume_state_of_an_in_place_run(tmp_path: Path) -> None:
    final = tmp_path / "checkpoints" / "sft" / "v2"
    (final / "checkpoints" / "step_1").mkdir(parents=True)  # an older, in-place run that was killed
    work = partial_folder(final)
    assert work.name == "v2.partial" and (work / "checkpoints" / "step_1").is_dir() and not final.exists()
    assert partial_folder(final) == work  # stable: a rerun resumes in the same folder


def test_retarget_rewrites_portable_and_absolute_paths(home: Path) -> None:
    from spec.paths import portable_path

    work, final = home / "checkpoints" / "sft" / "v3.partial", home / "checkpoints" / "sft" / "v3"
    record = {"path": portable_path(work), "config": {"output_dir": str(work), "policy": str(home / "x")},
              "inputs": [{"path": portable_path(work / "a.parquet")}], "note": str(work) + "-not-inside",
              "steps": 3}
    out = retarget(record, work, final)
    assert out == {"path": portable_path(final), "config": {"output_dir": str(final), "policy": str(home / "x")},
                   "inputs": [{"path": portable_path(final / "a.parquet")}], "note": str(work) + "-not-inside",
                   "steps": 3}
    assert ".partial" not in json.dumps({k: v for k, v in out.items() if k != "note"})
