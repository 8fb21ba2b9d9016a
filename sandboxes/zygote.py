"""The warm sandbox, host side: one pre-started zygote per interpreter, asked to fork each run.

Why: see sandboxes/zygote_main.py (the inside). A run costs a fork of an interpreter that has
already started, instead of bwrap + setpriv + prlimit + a fresh interpreter (~33 ms of start-up
here). Every per-run layer of the package docstring is still made per run, inside.

`start_run(command, request, fds)` sends one request (plain data: uid, rlimits, sizes; the
program, stdin, stdout, stderr and cgroup as fds, so their content never passes through the
zygote) and returns the run's status socket and the pidfd of the run's init once it exists.

Lifecycle: a zygote is started on first use by a keeper thread of its own, which then waits
for it: bwrap's --die-with-parent follows the *thread* that started it, so a pool worker that
ends would take it down. The zygote exits when this process closes the control socket (at
exit, where it is also waited for, or when this process is killed), so nothing outlives the host. One that died is replaced on the next run
(a run whose request it lost is retried once on the new one). A forked child of this process
starts its own.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import threading
from typing import Callable

REPLY_S = 30.0
"""Longest wait for a run's init to answer (a zygote's own start-up included)."""


class ZygoteError(RuntimeError):
    """The run could not be started (its detail is a sandbox_error's)."""


class Zygote:
    """One running zygote and its control socket."""

    def __init__(self, command: Callable[[int], list[str]]) -> None:
        self._control, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._send_lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self._pidfd: int | None = None  # closed by the keeper once it has reaped the zygote
        self._pid_lock = threading.Lock()
        self.alive = True
        self.problem: str | None = None
        started = threading.Event()
        self._keeper = threading.Thread(target=self._keep, args=(command(inside.fileno()), inside.fileno(), started),
                                        name="sandbox-zygote", daemon=True)
        self._keeper.start()
        started.wait()
        inside.close()
        if self.proc is None:
            self._control.close()
            raise ZygoteError(f"cannot start the sandbox: {self.problem}")

    def _keep(self, cmd: list[str], inside: int, started: threading.Event) -> None:
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         pass_fds=[inside], start_new_session=True,
                                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
            self._pidfd = os.pidfd_open(self.proc.pid)  # before the keeper can reap it
        except OSError as err:
            if self.proc is not None:  # started, but no pidfd: not a zygote this process can look after
                self.proc.kill()
                self.proc.wait()
                self.proc = None
            self.problem = str(err)
            self.alive = False
            return
        finally:
            started.set()
        _, err = self.proc.communicate()
        with self._pid_lock:
            os.close(self._pidfd)
            self._pidfd = None
        self.alive = False
        self.problem = f"the sandbox's zygote exited ({self.proc.returncode}): {err.decode(errors='replace')[-1000:]}"

    def send(self, request: dict, fds: list[int]) -> None:
        with self._send_lock:
            socket.send_fds(self._control, [json.dumps(request).encode()], fds)

    def close(self) -> None:
        """At exit: close the control socket, wait (briefly) for the zygote to exit and be reaped here."""
        self.alive = False
        self._control.close()
        self._keeper.join(timeout=2.0)

    def stop(self) -> None:
        """Close the control socket: the zygote exits, and its runs with it."""
        self.alive = False
        self._control.close()
        with self._pid_lock:
            if self._pidfd is not None:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)  # never another process, reaped or not
        self._keeper.join(timeout=5.0)  # then `problem` says why it stopped answering


_zygotes: dict[str, Zygote] = {}
_lock = threading.Lock()


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    for zygote in _zygotes.values():
        zygote._control.close()  # the parent's zygote: this child never talks to it
        if zygote._pidfd is not None:
            os.close(zygote._pidfd)
    _zygotes.clear()


def _close_all() -> None:
    for zygote in list(_zygotes.values()):
        zygote.close()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_close_all)  # its parent reaps it, not whichever process adopts an orphan


def _zygote(key: str, command: Callable[[int], list[str]]) -> Zygote:
    with _lock:
        zygote = _zygotes.get(key)
        if zygote is None or not zygote.alive:
            zygote = _zygotes[key] = Zygote(command)
        return zygote


def start_run(key: str, command: Callable[[int], list[str]], request: dict, fds: list[int]) -> tuple[socket.socket, int]:
    """Fork a run in the zygote for `key` (started with `command(control_fd)` when needed).
    `fds`: program, stdin, stdout, stderr and optionally the cgroup.procs fd (the caller keeps and
    closes its copies). Returns (status socket, pidfd of the run's init). Raises ZygoteError."""
    for attempt in range(2):
        zygote = _zygote(key, command)
        status, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                zygote.send(request, fds[:4] + [inside.fileno()] + fds[4:])
            except OSError:
                message, pidfd = b"", None
            else:
                inside.close()
                message, pidfd = _first_message(status)
            if pidfd is not None:
                return status, pidfd
        except BaseException:
            status.close()
            raise
        finally:
            inside.close()
        status.close()
        if message.startswith(b"error"):
            raise ZygoteError(f"sandbox setup failed: {message[6:].decode(errors='replace')}")
        zygote.stop()  # it lost the request: a broken or dead zygote
        if attempt == 1:
            raise ZygoteError(zygote.problem or "the sandbox's zygote does not answer")
    raise AssertionError("unreachable")


def _first_message(status: socket.socket) -> tuple[bytes, int | None]:
    """The init's first message: (b"pid", its pidfd), or (an error message or b"", None)."""
    ready, _, _ = select.select([status], [], [], REPLY_S)
    if not ready:
        return b"", None
    message, fds, _, _ = socket.recv_fds(status, 4096, 1)
    if message == b"pid" and len(fds) == 1:
        return message, fds[0]
    for fd in fds:
        os.close(fd)
    return message, None


def host_pid(pidfd: int) -> int | None:
    """The pid (in this process's namespace) of the process a pidfd refers to."""
    with open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Pid:"):
                pid = int(line.split()[1])
                return pid if pid > 0 else None
    return None
