"""An interactive sandboxed process: a Python program that stays alive and talks by lines.

Same sandbox as `run_python` (a fork of the warm sandbox: namespaces, slot uid, pinned rlimits,
seccomp, the run's memory guard; sandboxes.launch is shared), but stdin is a pipe the host writes lines to and
stdout is read line by line, so a verifier can keep a program (e.g. a candidate's solution, or a
judge) running across many requests and pass only plain data between processes.

Nothing here ever blocks past the process's lifetime (`limits.timeout_s`, counted from start):
`send` waits for pipe space while still draining the program's output, `readline` waits at most
its own timeout, and a timer kills the process when its lifetime is over even if the host is
idle. The program must flush what it writes (print(..., flush=True) or os.write) for a line to
reach the host. Not thread-safe: one user at a time.

>>> with SandboxProcess("import sys\\nfor line in sys.stdin:\\n    print(line.strip()[::-1], flush=True)") as p:
...     p.send(b"abc")
...     reply = p.readline(5.0)
>>> reply if sandbox_available() else b"cba"
b'cba'
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref

from sandboxes.core import sandbox_available, sandbox_problem  # noqa: F401 - sandbox_available: the doctest
from sandboxes.launch import Launch
from sandboxes.limits import SandboxLimits, SandboxResult


EXIT_GRACE_S = 0.5
"""close(kill=True) on a program whose stdout is already closed waits this long for its own exit."""


class SandboxClosed(RuntimeError):
    """The sandboxed process has ended (or was closed): nothing more can be sent to it."""


def _abandon(launch: Launch, timer: threading.Timer) -> None:
    """Finalizer of a SandboxProcess dropped without close(): kill it, release its slot."""
    timer.cancel()
    with contextlib.suppress(Exception):
        launch.kill("closed")
        launch.finish(drain=False)


class SandboxProcess:
    """A sandboxed Python program that stays alive and talks over stdin/stdout by lines."""

    def __init__(self, code: str, limits: SandboxLimits = SandboxLimits()) -> None:
        """Start it (limits.timeout_s is its total wall lifetime). Never raises for sandbox
        problems: they come back from close() as a sandbox_error result."""
        self.limits = limits
        self._launch: Launch | None = None
        self._result: SandboxResult | None = None
        self._scanned = 0  # stdout bytes already searched for a newline
        problem = sandbox_problem(limits.python)
        if problem is not None:
            self._result = SandboxResult("sandbox_error", None, detail=problem)
            return
        launch = Launch(code, limits, None)
        if launch.result is not None:
            self._result = launch.result
            return
        self._launch = launch
        self._timer = threading.Timer(max(0.0, launch.deadline - time.monotonic()), launch.kill, ("timeout",))
        self._timer.daemon = True
        self._timer.start()
        self._finalizer = weakref.finalize(self, _abandon, launch, self._timer)

    @property
    def uid(self) -> int | None:
        """The slot uid the program runs as."""
        return self._launch.uid if self._launch is not None else (self._result.uid if self._result else None)

    @property
    def alive(self) -> bool:
        """Whether the program still runs (not exited, not killed, not closed)."""
        launch = self._launch
        if launch is None:
            return False
        launch.pump(0)
        return not launch.exited and launch.killed_for is None

    def send(self, line: bytes) -> None:
        """Write `line` + b"\\n" to the program's stdin. Raises SandboxClosed if it has ended,
        was killed, or its lifetime runs out while the pipe is full."""
        launch = self._launch
        if launch is None:
            raise SandboxClosed("the sandboxed process is closed")
        data = memoryview(bytes(line) + b"\n")
        while data:
            if launch.exited or launch.killed_for is not None:
                raise SandboxClosed(f"the sandboxed process has ended ({launch.killed_for or 'exited'})")
            now = time.monotonic()
            if now >= launch.deadline:
                launch.kill("timeout")
                raise SandboxClosed("the sandboxed process's lifetime is over")
            try:
                data = data[launch.write_stdin(data):]
            except BlockingIOError:  # pipe full: keep draining its output while waiting for space
                launch.pump(launch.deadline - now, write_fd=launch.stdin_fd)
            except (BrokenPipeError, ValueError, OSError) as err:
                raise SandboxClosed(f"the sandboxed process no longer reads its stdin ({err})") from err

    def readline(self, timeout_s: float) -> bytes | None:
        """The next stdout line without its newline, or None on timeout or EOF. Waits at most
        `timeout_s` and never past the lifetime deadline (then the process is killed: timeout).
        A last line without a newline is returned at EOF."""
        launch = self._launch
        if launch is None:
            return None
        end = min(time.monotonic() + max(0.0, timeout_s), launch.deadline)
        while True:
            index = launch.out.find(b"\n", self._scanned)
            if index >= 0:
                line = bytes(launch.out[:index])
                del launch.out[:index + 1]
                self._scanned = 0
                return line
            self._scanned = len(launch.out)
            if not launch.stdout_open:
                if launch.out:
                    line = bytes(launch.out)
                    launch.out.clear()
                    self._scanned = 0
                    return line
                return None
            now = time.monotonic()
            if now >= launch.deadline:
                launch.kill("timeout")
                return None
            if now >= end:
                return None
            launch.pump(end - now)

    def close(self, kill: bool = True) -> SandboxResult:
        """End it and return its verdict, classified like run_python's. kill=True kills it at once
        (unless it already ended); kill=False closes its stdin and waits for it to exit, up to the
        lifetime deadline. The result's stdout is what the host had not read. Sweeps the slot uid,
        removes the cgroup, releases the slot. Idempotent."""
        if self._result is not None:
            return self._result
        launch = self._launch
        assert launch is not None
        self._timer.cancel()
        self._finalizer.detach()
        try:
            launch.close_stdin()
            launch.pump(0)
            if kill and not launch.exited and not launch.stdout_open:
                launch.wait(EXIT_GRACE_S)  # its output is closed: most likely it is exiting on its own
            if kill and not launch.exited:
                launch.kill("closed")
            self._result = launch.finish()
        finally:
            launch.release()
            self._launch = None
        return self._result

    def __enter__(self) -> "SandboxProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SandboxClosed", "SandboxProcess"]
