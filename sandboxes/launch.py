"""One started sandbox, shared by `run_python` (one shot) and `SandboxProcess` (interactive):
claim a slot, start bwrap inside the run's memory guard, read stdout/stderr with caps, kill,
wait, sweep the uid, release everything, classify. See the package docstring."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import threading
import time

from sandboxes import seccomp
from sandboxes.command import build_command, memfd
from sandboxes.limits import SandboxLimits, SandboxResult
from sandboxes.memory import open_guard
from sandboxes.slots import acquire_slot, sweep_uid

KILL_DRAIN_S = 0.5
"""After a kill, how long to keep reading what the program wrote before it (its pipes close at once)."""


class Launch:
    """A sandbox from start to verdict. `stdin` bytes are the program's whole stdin; None gives a
    pipe (`stdin_fd`) to write to. After construction either `result` is set (it never started)
    or the program runs. Drive it with `pump`, end it with `finish` (which always releases)."""

    def __init__(self, code: str, limits: SandboxLimits, stdin: bytes | None) -> None:
        self.limits = limits
        self.result: SandboxResult | None = None
        self.killed_for: str | None = None
        self.warnings = [] if seccomp.filter_bpf() is not None else ["seccomp unavailable (libseccomp not found)"]
        self.out, self.err = bytearray(), bytearray()
        self.received = {"out": 0, "err": 0}
        self.exited = False
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()
        self._fds: list[int] = []
        self._guard = None
        self._pidfd: int | None = None
        self._sel = selectors.DefaultSelector()
        self._stack.callback(self._sel.close)
        self._stack.callback(self._close_fds)
        self.proc: subprocess.Popen | None = None
        self.stdin_fd: int | None = None
        try:
            self._start(code, limits, stdin)
        except BaseException:
            self.release()  # kills what was started, removes the cgroup, frees the slot
            raise
        if self.result is not None:
            self.release()

    def _start(self, code: str, limits: SandboxLimits, stdin: bytes | None) -> None:
        slot = self._stack.enter_context(acquire_slot())
        self.uid = slot.uid
        program = self._keep(memfd("program", code.encode()))
        stdin_arg = self._keep(memfd("stdin", stdin)) if stdin is not None else subprocess.PIPE
        self._status_r, status_w = os.pipe()
        self._keep(self._status_r)
        self._keep(status_w)
        sec_fd = seccomp.filter_fd()
        if sec_fd is not None:
            self._keep(sec_fd)
        self._guard, notes = open_guard(slot.uid, limits.memory_mb << 20)
        self.warnings += notes
        cmd = self._guard.wrap(build_command(limits, slot.uid, program, status_w, sec_fd))
        self.start = time.monotonic()
        self.deadline = self.start + limits.timeout_s
        try:
            self.proc = subprocess.Popen(cmd, stdin=stdin_arg, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         pass_fds=[program, status_w] + ([sec_fd] if sec_fd is not None else []),
                                         start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except OSError as err:
            self.result = SandboxResult("sandbox_error", None, detail=f"cannot start bwrap: {err}", warnings=self.warnings)
            return
        self._pidfd = os.pidfd_open(self.proc.pid)  # a zombie until we reap it: always this process
        self._fds.remove(status_w)
        os.close(status_w)
        self._sel.register(self.proc.stdout, selectors.EVENT_READ, "out")
        self._sel.register(self.proc.stderr, selectors.EVENT_READ, "err")
        self._sel.register(self._pidfd, selectors.EVENT_READ, "exit")
        if self._guard.event_fd() is not None:
            self._sel.register(self._guard.event_fd(), selectors.EVENT_READ, "memory")
        self.stdin_fd = self.proc.stdin.fileno() if self.proc.stdin else None
        if self.stdin_fd is not None:
            os.set_blocking(self.stdin_fd, False)
        self._guard.start(lambda: self.kill("memory_limit"), self.proc.pid)

    def _keep(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    def _close_fds(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    @property
    def stdout_open(self) -> bool:
        """Whether stdout may still bring data."""
        return any(key.data == "out" for key in self._sel.get_map().values())

    def write_stdin(self, data: memoryview) -> int:
        """Write what the stdin pipe takes now (BlockingIOError when it takes nothing)."""
        if self.stdin_fd is None:
            raise ValueError("stdin is not a pipe")
        return os.write(self.stdin_fd, data)

    def close_stdin(self) -> None:
        """EOF on the program's stdin."""
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            self.stdin_fd = None

    @property
    def reading(self) -> bool:
        """Whether stdout or stderr may still bring data."""
        return any(key.data in ("out", "err") for key in self._sel.get_map().values())

    def pump(self, timeout: float, write_fd: int | None = None) -> bool:
        """Wait up to `timeout` s for output, the exit or a memory event and take them in.
        Returns True when `write_fd` (registered for this call only) became writable."""
        if write_fd is not None:
            self._sel.register(write_fd, selectors.EVENT_WRITE, "in")
        writable = False
        try:
            for key, _ in self._sel.select(timeout=max(0.0, timeout)):
                if key.data == "in":
                    writable = True
                elif key.data == "exit":
                    self.exited = True
                    self._sel.unregister(key.fileobj)
                elif key.data == "memory":
                    self._guard.on_event()
                    self.kill("memory_limit")
                else:
                    self._read(key)
        finally:
            if write_fd is not None:
                self._sel.unregister(write_fd)
        return writable

    def _read(self, key: selectors.SelectorKey) -> None:
        chunk = os.read(key.fd, 65536)
        if not chunk:
            self._sel.unregister(key.fileobj)
            return
        buf = self.out if key.data == "out" else self.err
        cap = self.limits.stdout_bytes if key.data == "out" else self.limits.stderr_bytes
        buf += chunk
        self.received[key.data] += len(chunk)
        over = self.received[key.data] - cap
        if over > 0:
            del buf[len(buf) - over:]
            self.received[key.data] = cap
            self.kill("output_limit")

    def wait(self, seconds: float, until_eof: bool = False) -> None:
        """Take in output for up to `seconds` (never past the deadline unless killed), until the
        process has exited (or, with until_eof, until stdout and stderr are closed)."""
        end = time.monotonic() + seconds
        if not self.killed_for:
            end = min(end, self.deadline)
        while (self.reading if until_eof else not self.exited) and (left := end - time.monotonic()) > 0:
            self.pump(left)

    def kill(self, reason: str) -> None:
        """Kill the sandbox now (first reason wins). Through the pidfd, so never another process.
        bwrap's init then dies (--die-with-parent) and the pid namespace takes every process inside
        down with it; the uid sweep in finish() catches anything else."""
        with self._lock:
            if self.killed_for is None and not self.exited:
                self.killed_for = reason
            if self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def finish(self, drain: bool = True) -> SandboxResult:
        """Wait for the end (killing it at the deadline), sweep, release, classify. Idempotent."""
        if self.result is not None:
            return self.result
        try:
            while not self.killed_for and (self.reading and drain or not self.exited):
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    self.kill("timeout")
                    break
                self.pump(remaining)
            if self.killed_for and drain:  # what it wrote before the kill (e.g. a traceback): its pipes close at once
                self.wait(KILL_DRAIN_S, until_eof=True)
            exit_code = self.proc.wait()
            exit_code = 128 - exit_code if exit_code < 0 else exit_code  # killed by us: shell convention
            wall_ms = (time.monotonic() - self.start) * 1000
            started = _sandbox_started(self._status_r)
            try:
                leftovers = sweep_uid(self.uid)
            except (RuntimeError, OSError) as err:
                self.result = SandboxResult("sandbox_error", exit_code, detail=f"sweep failed: {err}")
                return self.result
            result = self._classify(exit_code, started)
            result.wall_ms = round(wall_ms, 2)
            result.uid = self.uid
            result.memory_peak_mb = self._guard.peak_mb()
            result.warnings = self.warnings + ([f"swept {leftovers} leftover process(es)"] if leftovers else [])
            self.result = result
            return result
        finally:
            self.release()

    def release(self) -> None:
        """Stop the guard, remove its cgroup, close every fd, release the slot (idempotent)."""
        with self._lock:
            pidfd, self._pidfd = self._pidfd, None
        if self.proc is not None:
            if self.proc.poll() is None:  # abandoned while running (an exception): kill first
                if pidfd is not None:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                else:
                    self.proc.kill()  # not reaped yet: still our child's pid
                self.proc.wait()
                with contextlib.suppress(RuntimeError, OSError):
                    sweep_uid(self.uid)
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._guard is not None:
            notes = self._guard.close()
            if self.result is not None:
                self.result.warnings += notes
            self._guard = None
        if pidfd is not None:
            os.close(pidfd)
        self._stack.close()

    def _classify(self, exit_code: int, started: bool) -> SandboxResult:
        limits = self.limits
        stdout, stderr = self.out.decode(errors="replace"), self.err.decode(errors="replace")
        if self._guard.tripped():
            return SandboxResult("memory_limit", exit_code, stdout, stderr,
                                 detail=f"memory of the whole run > {limits.memory_mb} MiB ({self._guard.kind})")
        if self.killed_for == "timeout":
            return SandboxResult("timeout", exit_code, stdout, stderr, detail=f"wall clock > {limits.timeout_s}s")
        if self.killed_for == "output_limit":
            return SandboxResult("output_limit", exit_code, stdout, stderr,
                                 detail=f"output over {limits.stdout_bytes} (stdout) / {limits.stderr_bytes} (stderr) bytes")
        if not started:
            return SandboxResult("sandbox_error", None, stdout, stderr, detail=f"bwrap failed to start: {stderr.strip()[-500:]}")
        if self.killed_for == "closed" and exit_code == 128 + signal.SIGKILL:
            return SandboxResult("error", exit_code, stdout, stderr, detail="killed by the host (closed while running)")
        if exit_code == 0:
            return SandboxResult("ok", 0, stdout, stderr)
        signum = exit_code - 128 if exit_code > 128 else None
        if signum == signal.SIGXCPU:
            return SandboxResult("timeout", exit_code, stdout, stderr, detail="CPU time limit")
        tail = stderr.strip().splitlines()[-1:] or [""]
        if tail[0].startswith("MemoryError"):  # labels a failure; can never turn one into ok
            return SandboxResult("memory_limit", exit_code, stdout, stderr,
                                 detail=f"one process's address space > {limits.address_space_mb or limits.memory_mb} MiB")
        if signum == signal.SIGXFSZ:
            return SandboxResult("error", exit_code, stdout, stderr, detail=f"file size limit ({limits.file_size_mb} MiB)")
        detail = f"killed by signal {signal.Signals(signum).name}" if signum in signal.valid_signals() else f"exit code {exit_code}"
        return SandboxResult("error", exit_code, stdout, stderr, detail=detail)


def _sandbox_started(status_fd: int) -> bool:
    """bwrap writes {"child-pid": N} on this fd once the sandbox is set up (program-proof)."""
    data = b""
    while chunk := os.read(status_fd, 4096):
        data += chunk
    for line in data.decode(errors="replace").splitlines():
        try:
            if "child-pid" in json.loads(line):
                return True
        except (json.JSONDecodeError, TypeError):
            continue
    return False
