"""The run memory guard's own mechanics: cgroup placement and cleanup, stale sweep, watchdog
accounting, fallback. (The attacks themselves are in tests/redteam/test_sandbox_memory.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import sandboxes.memory
from sandboxes.cgroups import PREFIX, CgroupGuard, working_hierarchy
from sandboxes.core import run_python, sandbox_available
from sandboxes.limits import SandboxLimits
from sandboxes.memory import Watchdog, guard_kind, open_guard
from sandboxes.session import SandboxProcess
from sandboxes.slots import UID_BASE, acquire_slot, pids_of_uid

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")
needs_cgroup = pytest.mark.skipif(os.geteuid() != 0 or working_hierarchy() is None,
                                  reason="no working memory cgroup on this machine (the watchdog is used)")


def memory_cgroup_of(pid: int) -> str:
    for line in open(f"/proc/{pid}/cgroup").read().splitlines():
        num, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") or (num == "0" and working_hierarchy().version == 2):
            return path
    return ""


@needs_sandbox
@needs_cgroup
def test_every_process_of_a_run_is_in_its_cgroup_and_the_cgroup_goes_away() -> None:
    code = "import os, sys, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('up', flush=True)\nsys.stdin.readline()"
    with SandboxProcess(code, SandboxLimits(timeout_s=10)) as proc:
        assert proc.readline(5.0) == b"up"
        uid = proc.uid
        path = os.path.join(working_hierarchy().parent, f"{PREFIX}{uid}")
        assert os.path.isdir(path)
        pids = pids_of_uid(uid)
        assert len(pids) == 2
        assert all(memory_cgroup_of(pid).endswith(f"/{PREFIX}{uid}") for pid in pids)
    assert not os.path.exists(path)
    result = run_python("print(1)")
    assert result.ok and not os.path.exists(os.path.join(working_hierarchy().parent, f"{PREFIX}{result.uid}"))


@needs_cgroup
def test_stale_cgroup_of_a_crashed_run_is_swept() -> None:
    with acquire_slot() as slot:
        stale = CgroupGuard(working_hierarchy(), str(slot.uid), 64 << 20)
        leftover = subprocess.Popen(stale.wrap(["sleep", "60"]))  # a process a crashed parent left in it
        time.sleep(0.1)
        assert leftover.poll() is None
        fresh = CgroupGuard(working_hierarchy(), str(slot.uid), 64 << 20)  # the slot's next run
        try:
            assert leftover.wait(timeout=5) == -9
            assert fresh.path == stale.path and os.path.isdir(fresh.path)
            assert open(os.path.join(fresh.path, "cgroup.procs")).read() == ""
        finally:
            assert fresh.close() == []
        assert not os.path.exists(fresh.path)


@needs_sandbox
def test_watchdog_counts_the_run_from_its_first_root_process() -> None:
    """The program starts as root (setpriv) and only then becomes the slot uid, in the same process."""
    with acquire_slot() as slot:
        script = "import time\nb = bytearray(100 << 20)\nprint('ready', flush=True)\ntime.sleep(30)"
        proc = subprocess.Popen(["sh", "-c", 'sleep 0.2; exec setpriv --reuid="$0" --regid="$0" --clear-groups "$@"',
                                 str(slot.uid), sys.executable, "-I", "-S", "-c", script], stdout=subprocess.PIPE)
        watchdog = Watchdog(slot.uid, 1 << 40)
        watchdog.follow(proc.pid)
        try:
            assert watchdog.measure() < 10 << 20  # still root: followed, not counted yet
            assert proc.stdout.readline() == b"ready\n"
            assert 100 << 20 < watchdog.measure() < 200 << 20
            unrelated = Watchdog(slot.uid + 1, 1 << 40)  # another uid sees none of it
            assert unrelated.measure() == 0
        finally:
            proc.kill()
            proc.wait()


def test_fallbacks_are_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandboxes.memory, "working_hierarchy", lambda: None)
    guard, notes = open_guard(UID_BASE, 1 << 30)
    assert isinstance(guard, Watchdog) and "watchdog" in notes[0]
    assert guard_kind() == "watchdog"

    monkeypatch.setattr(sandboxes.memory, "working_hierarchy", lambda: object())

    def broken(*args: object) -> None:
        raise PermissionError(13, "read-only cgroup")

    monkeypatch.setattr(sandboxes.memory, "CgroupGuard", broken)
    guard, notes = open_guard(UID_BASE, 1 << 30)
    assert isinstance(guard, Watchdog) and "read-only cgroup" in notes[0]
    monkeypatch.setenv(sandboxes.memory.GUARD_ENV, "watchdog")
    assert guard_kind() == "watchdog"
