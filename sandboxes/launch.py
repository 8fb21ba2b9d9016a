"""One started sandbox, shared by `run_python` (one shot) and `SandboxProcess` (interactive):
claim a slot, open the run's memory guard, have the warm sandbox fork the run (sandboxes/zygote.py),
read stdout/stderr with caps, kill, wait, sweep the uid, release everything, classify. See the
package docstring."""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import socket
import threading
import time
from functools import partial

from sandboxes import seccomp
from sandboxes.command import memfd, rlimits, zygote_command, zygote_key
from sandboxes.limits import SandboxLimits, SandboxResult
from sandboxes.memory import open_guard
from sandboxes.slots import acquire_slot, sweep_uid
from sandboxes.zygote import ZygoteError, host_pid, start_run

KILL_DRAIN_S = 0.5
"""After a kill, how long to keep reading what the program wrote before it (its pipes close at once)."""
EXIT_WAIT_S = 10.0
"""After SIGKILL to the run's init, how long to wait for it to be gone (it is at once)."""


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
        self._status: socket.socket | None = None
        self._started = False
        self._exit_code: int | None = None
        self._setup_error = ""
        self._sel = selectors.DefaultSelector()
        self._stack.callback(self._sel.close)
        self._stack.callback(self._close_fds)
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
        passed: list[int] = []  # the fds the run gets; this process's copies are closed once sent
        try:
            passed.append(memfd("program", code.encode()))
            if stdin is not None:
                passed.append(memfd("stdin", stdin))
            else:
                read_end, self.stdin_fd = os.pipe()
                passed.append(read_end)
                os.set_blocking(self._keep(self.stdin_fd), False)
            for name in ("out", "err"):
                read_end, write_end = os.pipe()
                self._sel.register(self._keep(read_end), selectors.EVENT_READ, name)
                passed.append(write_end)
            self._guard, notes = open_guard(slot.uid, limits.memory_mb << 20)
            self.warnings += notes
            enter = self._guard.enter_fd()
            if enter is not None:
                passed.append(enter)
            request = {"uid": slot.uid, "rlimits": rlimits(limits), "tmpfs_bytes": limits.tmpfs_mb << 20,
                       "cgroup": enter is not None}
            self.start = time.monotonic()
            self.deadline = self.start + limits.timeout_s
            try:
                self._status, self._pidfd = start_run(zygote_key(limits), partial(zygote_command, limits), request, passed)
            except ZygoteError as err:
                self.result = SandboxResult("sandbox_error", None, detail=str(err), warnings=self.warnings)
                return
        finally:
            for fd in passed:
                os.close(fd)
        self._sel.register(self._status, selectors.EVENT_READ, "status")
        self._sel.register(self._pidfd, selectors.EVENT_READ, "exit")
        if self._guard.event_fd() is not None:
            self._sel.register(self._guard.event_fd(), selectors.EVENT_READ, "memory")
        self._guard.start(lambda: self.kill("memory_limit"), host_pid(self._pidfd) or 0)

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
        if self.stdin_fd is not None:
            self._fds.remove(self.stdin_fd)
            os.close(self.stdin_fd)
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
                elif key.data == "status":
                    self._read_status()
                else:
                    self._read(key)
        finally:
            if write_fd is not None:
                self._sel.unregister(write_fd)
        return writable

    def _read_status(self) -> bool:
        """Take in one message of the run's init (b"started", b"exit N", b"error TEXT"), or its
        EOF; False when there was none."""
        if self._status.fileno() not in self._sel.get_map():
            return False
        try:
            message = self._status.recv(4096)
        except BlockingIOError:
            return False
        if not message:
            self._sel.unregister(self._status)
            return False
        if message == b"started":
            self._started = True
        elif message.startswith(b"exit "):
            self._exit_code = int(message[5:])
        elif message.startswith(b"error "):
            self._setup_error = message[6:].decode(errors="replace")
        return True

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
        the run's init is pid 1 of its pid namespace, which takes every process inside down with
        it; the uid sweep in finish() catches anything else."""
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
            if not self._await_exit():
                self.result = SandboxResult("sandbox_error", None, detail="the run's init did not exit after SIGKILL")
                return self.result
            wall_ms = (time.monotonic() - self.start) * 1000
            # No exit status from the init: it was killed (by us): 128 + SIGKILL, the shell convention.
            exit_code = self._exit_code if self._exit_code is not None else 128 + signal.SIGKILL
            try:
                leftovers = sweep_uid(self.uid)
            except (RuntimeError, OSError) as err:
                self.result = SandboxResult("sandbox_error", exit_code, detail=f"sweep failed: {err}")
                return self.result
            result = self._classify(exit_code, self._started)
            result.wall_ms = round(wall_ms, 2)
            result.uid = self.uid
            result.memory_peak_mb = self._guard.peak_mb()
            result.warnings = self.warnings + ([f"swept {leftovers} leftover process(es)"] if leftovers else [])
            self.result = result
            return result
        finally:
            self.release()

    def _await_exit(self) -> bool:
        """After the loop of finish() the init has exited or was killed: wait until it is gone,
        then take in its last status messages (sent before it exited)."""
        end = time.monotonic() + EXIT_WAIT_S
        while not self.exited and (left := end - time.monotonic()) > 0:
            self.pump(left)
        self._status.setblocking(False)
        while self._read_status():
            pass
        return self.exited

    def release(self) -> None:
        """Stop the guard, remove its cgroup, close every fd, release the slot (idempotent)."""
        with self._lock:
            pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            if not self.exited:  # abandoned while running (an exception): kill first
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                select.select([pidfd], [], [], EXIT_WAIT_S)
                with contextlib.suppress(RuntimeError, OSError):
                    sweep_uid(self.uid)
            os.close(pidfd)
        if self._guard is not None:
            notes = self._guard.close()
            if self.result is not None:
                self.result.warnings += notes
            self._guard = None
        if self._status is not None:
            self._status.close()
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
            return SandboxResult("sandbox_error", None, stdout, stderr,
                                 detail=f"sandbox setup failed: {self._setup_error or 'the run ended before its program started'}")
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
