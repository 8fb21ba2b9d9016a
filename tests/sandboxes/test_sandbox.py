"""The sandbox API: statuses, isolation properties of the sandboxed process, pool, CLI."""

from __future__ import annotations

import doctest
import json

import pytest

import sandboxes.core
import sandboxes.pool
import sandboxes.seccomp
from dagster_project.cli import main as cascade_main
from sandboxes.core import run_python, sandbox_available
from sandboxes.limits import SandboxLimits
from sandboxes.pool import SandboxJob, SandboxPool
from sandboxes.slots import UID_BASE, acquire_slot, sweep_uid

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")
FAST = SandboxLimits(timeout_s=3.0)


@needs_sandbox
def test_stdin_stdout_and_exit_codes() -> None:
    ok = run_python("import sys\nprint(sys.stdin.read().upper(), end='')", "abc\n", FAST)
    assert (ok.status, ok.exit_code, ok.stdout, ok.stderr) == ("ok", 0, "ABC\n", "")
    bad = run_python("print('all good')\nraise SystemExit(5)", None, FAST)
    assert (bad.status, bad.exit_code, bad.stdout) == ("error", 5, "all good\n")
    crash = run_python("1/0", None, FAST)
    assert crash.status == "error" and "ZeroDivisionError" in crash.stderr


@needs_sandbox
def test_limits_map_to_statuses() -> None:
    assert run_python("import time\ntime.sleep(5)", None, SandboxLimits(timeout_s=0.5)).status == "timeout"
    cpu = run_python("while True: pass", None, SandboxLimits(timeout_s=5, cpu_s=1))
    assert cpu.status == "timeout" and cpu.detail == "CPU time limit"
    assert run_python("b = bytearray(600 << 20)", None, SandboxLimits(memory_mb=256)).status == "memory_limit"
    flood = run_python("print('x' * 5000)", None, SandboxLimits(stdout_bytes=1000))
    assert flood.status == "output_limit" and len(flood.stdout) == 1000


@needs_sandbox
def test_process_identity_inside() -> None:
    code = "import os, socket\nprint(os.getuid(), os.getgid(), os.getgroups(), socket.gethostname(), os.getcwd())\n" \
           "print(open('/proc/self/status').read())"
    result = run_python(code, None, FAST)
    first, status = result.stdout.split("\n", 1)
    uid = str(result.uid)
    assert first == f"{uid} {uid} [] sandbox /tmp" and result.uid >= UID_BASE
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["CapEff"].strip() == fields["CapBnd"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    if sandboxes.seccomp.filter_bpf() is not None:
        assert fields["Seccomp"].strip() == "2"  # filter mode


@needs_sandbox
def test_pool_runs_in_parallel_and_keeps_order() -> None:
    # Concurrent jobs hold distinct slots, so distinct uids; run one after another they
    # would reuse the same free slot.
    job = SandboxJob("import os, time\ntime.sleep(1)\nprint(os.getuid())", None, FAST)
    with SandboxPool(max_workers=2) as pool:
        results = pool.map([job, job, SandboxJob("print('third')", None, FAST)])
    assert [r.status for r in results] == ["ok"] * 3
    assert results[0].stdout != results[1].stdout and results[2].stdout == "third\n"


@needs_sandbox
def test_pool_budget_skips_and_times_out() -> None:
    with SandboxPool(max_workers=1) as pool:
        skipped = pool.submit(SandboxJob("print(1)"), lambda: None).result()
        spent = pool.submit(SandboxJob("print(1)"), lambda: 0.0).result()
        capped = pool.submit(SandboxJob("import time\ntime.sleep(5)"), lambda: 0.3).result()
    assert skipped is None and spent.status == "timeout" and capped.status == "timeout"


def test_missing_bwrap_is_a_clear_sandbox_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_python("print(1)")
    assert result.status == "sandbox_error" and "bubblewrap" in result.detail and result.exit_code is None


def test_slots_are_exclusive_and_sweep_refuses_system_uids() -> None:
    with acquire_slot() as a, acquire_slot() as b:
        assert a.uid != b.uid and min(a.uid, b.uid) >= UID_BASE
    with pytest.raises(ValueError):
        sweep_uid(0)


@needs_sandbox
def test_cli_prints_one_json_verdict(tmp_path, capsys: pytest.CaptureFixture) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(input()[::-1])")
    (tmp_path / "in.txt").write_text("abc\n")
    assert cascade_main(["sandbox", str(program), "--stdin", str(tmp_path / "in.txt"), "--timeout", "3"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "ok" and verdict["exit_code"] == 0 and verdict["stdout"] == "cba\n"
    assert set(verdict) >= {"status", "exit_code", "stdout", "stderr", "wall_ms"}
    program.write_text("import time\ntime.sleep(10)")
    assert cascade_main(["sandbox", str(program), "--timeout", "0.5"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "timeout"


@needs_sandbox
@pytest.mark.parametrize("module", [sandboxes.core, sandboxes.pool, sandboxes.seccomp])
def test_doctests(module) -> None:
    failures, tried = doctest.testmod(module)
    assert tried > 0 and failures == 0
