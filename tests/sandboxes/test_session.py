"""SandboxProcess: a long-lived sandboxed program the host talks to by lines."""

from __future__ import annotations

import doctest
import os
import textwrap
import threading
import time

import pytest

import sandboxes.session
from sandboxes.core import sandbox_available
from sandboxes.limits import SandboxLimits
from sandboxes.session import SandboxClosed, SandboxProcess
from sandboxes.slots import pids_of_uid

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")
ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line.upper())\n    sys.stdout.flush()\n"
LIFE = SandboxLimits(timeout_s=10.0)


@needs_sandbox
def test_echo_round_trips() -> None:
    with SandboxProcess(ECHO, LIFE) as proc:
        for i in range(20):
            proc.send(b"line %d" % i)
            assert proc.readline(5.0) == b"LINE %d" % i
        big = b"x" * 300_000  # several pipe buffers each way: send keeps draining while it writes
        proc.send(big)
        assert proc.readline(5.0) == big.upper()
        assert proc.alive
        result = proc.close(kill=False)  # EOF on stdin: the loop ends, exit 0
    assert (result.status, result.exit_code, result.stdout) == ("ok", 0, "")


@needs_sandbox
def test_readline_timeout_returns_none_quickly() -> None:
    with SandboxProcess("import time\nprint('hi', flush=True)\ntime.sleep(30)", LIFE) as proc:
        assert proc.readline(5.0) == b"hi"
        start = time.monotonic()
        assert proc.readline(0.2) is None
        assert time.monotonic() - start < 0.5
        assert proc.alive


@needs_sandbox
def test_program_exiting_mid_conversation() -> None:
    code = "import sys\nprint(input()[::-1], flush=True)\nsys.stderr.write('bye\\n')\nsys.exit(3)"
    proc = SandboxProcess(code, LIFE)
    proc.send(b"abc")
    assert proc.readline(5.0) == b"cba"
    assert proc.readline(5.0) is None  # EOF, well before the timeout
    # EOF means stdout closed; the exit itself may land a moment later (bwrap tears down after the child)
    waited = time.monotonic() + 30
    while proc.alive and time.monotonic() < waited:
        time.sleep(0.01)
    assert not proc.alive
    with pytest.raises(SandboxClosed):
        proc.send(b"more")
    result = proc.close()
    assert (result.status, result.exit_code, result.detail, result.stderr) == ("error", 3, "exit code 3", "bye\n")
    assert proc.close() is result  # idempotent
    assert proc.readline(0.1) is None


@needs_sandbox
def test_lifetime_timeout() -> None:
    proc = SandboxProcess("import time\ntime.sleep(60)", SandboxLimits(timeout_s=1.0))
    start = time.monotonic()
    assert proc.readline(10.0) is None  # never waits past the lifetime
    assert time.monotonic() - start < 2.0
    result = proc.close(kill=False)
    assert result.status == "timeout" and result.detail == "wall clock > 1.0s", result


@needs_sandbox
def test_lifetime_is_enforced_while_the_host_is_idle() -> None:
    proc = SandboxProcess("import time\ntime.sleep(60)", SandboxLimits(timeout_s=0.5))
    time.sleep(1.0)  # no call meanwhile: the lifetime timer kills it anyway
    assert not proc.alive
    assert proc.close().status == "timeout"


@needs_sandbox
def test_slot_uid_is_swept_after_close() -> None:
    daemon = textwrap.dedent("""\
        import os, time
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(1000)
            os._exit(0)
        os.waitpid(child, 0)  # the daemon (grandchild) exists once its parent is gone
        print('spawned', flush=True)
        time.sleep(1000)""")
    proc = SandboxProcess(daemon, LIFE)
    assert proc.readline(5.0) == b"spawned"
    uid = proc.uid
    assert uid is not None and len(pids_of_uid(uid)) >= 2
    result = proc.close()
    assert result.uid == uid and pids_of_uid(uid) == []


@needs_sandbox
def test_memory_limit_applies_to_a_session() -> None:
    code = textwrap.dedent("""\
        import os, sys
        blocks = []
        for line in sys.stdin:
            if os.fork() == 0:  # each request: a child holding 300 MiB
                blocks.append(bytearray(300 << 20))
                print('held', flush=True)
                import time; time.sleep(60)
            """)
    proc = SandboxProcess(code, SandboxLimits(timeout_s=15, memory_mb=512))
    replies = []
    for _ in range(4):
        try:
            proc.send(b"more")
        except SandboxClosed:
            break
        replies.append(proc.readline(5.0))
    result = proc.close()
    assert result.status == "memory_limit" and "512 MiB" in result.detail, result
    assert replies.count(b"held") < 2


@needs_sandbox
def test_stdout_cap_applies() -> None:
    proc = SandboxProcess("import sys\nwhile True:\n    sys.stdout.write('y' * 1000 + '\\n')", SandboxLimits(stdout_bytes=50_000))
    lines = 0
    while proc.readline(5.0) is not None:
        lines += 1
    assert lines <= 50
    assert proc.close().status == "output_limit"


@needs_sandbox
def test_sequential_sessions_leak_nothing() -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    with SandboxProcess(ECHO, LIFE) as warm:  # first use: self test, memory guard probe
        warm.send(b"x")
        warm.readline(5.0)
    before, threads, uids = fds(), threading.active_count(), set()
    for i in range(15):
        proc = SandboxProcess(ECHO, LIFE)
        proc.send(b"ping")
        assert proc.readline(5.0) == b"PING"
        uids.add(proc.uid)
        proc.close(kill=i % 2 == 0)
    assert fds() == before  # each session's slot lock fd closed with it: the slot was released
    assert threading.active_count() == threads
    # Slots are machine-wide (sandboxes.slots), so another pytest worker's sandbox may hold the lowest one
    # when a session starts and it takes the next: the uids need not be one, but a session that kept its
    # slot would make every later one take a new uid.
    assert len(uids) < 15


def test_sandbox_problem_is_reported_by_close(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    proc = SandboxProcess("print(1)")
    assert not proc.alive and proc.readline(1.0) is None
    with pytest.raises(SandboxClosed):
        proc.send(b"x")
    result = proc.close()
    assert result.status == "sandbox_error" and "bubblewrap" in result.detail


@needs_sandbox
def test_doctest() -> None:
    failures, tried = doctest.testmod(sandboxes.session)
    assert tried > 0 and failures == 0
