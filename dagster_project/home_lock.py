"""One writer per `$CASCADE_HOME` at a time, and a safe first start of its Dagster instance.

Two locks, both `fcntl.flock` on a file in the home:

  `$CASCADE_HOME/.lock`           held for the whole of `cascade run` (every command that
                                  materializes). A second run exits at once with `HomeBusy`
                                  (exit code 3, naming the holder) or, with `--wait`, waits.
  `<DAGSTER_HOME>/.instance.lock` held briefly by every command (read-only ones too) while it
                                  opens the Dagster instance, so the SQLite schema is created and
                                  migrated by one process only.

The kernel drops a flock when its holder exits, however it exits (kill -9 included), so a dead
holder never leaves a stale lock behind: the holder details in the lock file are only for the
message. flock is per host; a home on a network file system shared by several hosts is not
protected against runs on other hosts.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

LOCK_FILE = ".lock"
INSTANCE_LOCK_FILE = ".instance.lock"
BUSY_EXIT_CODE = 3
"""`cascade run`'s exit code when another run holds the home (and `--wait` was not given)."""


class HomeBusy(RuntimeError):
    """Another process holds the home's lock; `holder` is what it wrote (pid, started, command)."""

    def __init__(self, home: Path, holder: dict[str, Any]):
        self.home, self.holder = home, holder
        pid, started = holder.get("pid", "unknown"), holder.get("started", "at an unknown time")
        command = f", `{holder['command']}`" if holder.get("command") else ""
        super().__init__(f"another run (pid {pid}, started {started}{command}) holds this home {home}; "
                         "wait for it to finish, or pass --wait to queue behind it")


def read_holder(home: Path) -> dict[str, Any]:
    """What the current (or last) holder of the home lock wrote; {} when nothing readable."""
    try:
        return json.loads((Path(home) / LOCK_FILE).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _holder_of_busy(home: Path, tries: int = 100) -> dict[str, Any]:
    """The holder's record, read again while it is still being written: the holder writes it
    just after taking the lock, so a run started at the same moment may find it empty or cut."""
    for _ in range(tries):
        holder = read_holder(home)
        if holder.get("pid"):
            return holder
        time.sleep(0.02)
    return holder


@contextmanager
def home_lock(home: Path, command: str, wait: bool = False,
              on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[dict[str, Any]]:
    """Hold `<home>/.lock` exclusively for the block; yields the holder record written into it.

    Busy: raise `HomeBusy` at once, or with `wait` call `on_wait(holder)` once and block until
    the holder exits."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_of_busy(home)
            if not wait:
                raise HomeBusy(home, holder) from None
            if on_wait:
                on_wait(holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        record = {"pid": os.getpid(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "command": command}
        data = json.dumps(record).encode()
        os.pwrite(fd, data, 0)  # write, then cut: the file is never empty while held
        os.ftruncate(fd, len(data))
        yield record
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


_held: dict[str, int] = {}
_held_guard = threading.Lock()


@contextmanager
def instance_lock(dagster_home: Path) -> Iterator[None]:
    """Hold `<dagster_home>/.instance.lock` (blocking) for the block. Re-entrant in one process:
    a second flock on a new descriptor of the same file would wait on ourselves."""
    dagster_home = Path(dagster_home)
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = str(dagster_home / INSTANCE_LOCK_FILE)
    with _held_guard:
        nested = path in _held
        if nested:
            _held[path] += 1
    if nested:
        try:
            yield
        finally:
            with _held_guard:
                _held[path] -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with _held_guard:
            _held[path] = 1
        try:
            yield
        finally:
            with _held_guard:
                del _held[path]
    finally:
        os.close(fd)


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed (`cascade run --recipe ...`), for the holder record."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["cascade", *args])


PID_TAG, HOST_TAG = "cascade/pid", "cascade/host"
"""Run tags naming the process that executes a run, so a run whose process died can be told apart."""


def run_tags() -> dict[str, str]:
    """Tags for every run this process starts (read by `recover_home` on a later run)."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def recover_home(instance: Any, home: Path) -> str | None:
    """What a killed run left: its Dagster run still `STARTED` (marked failed, when its process on
    this host is gone) and its `.tmp-*` folders (assets.publish.clean_leftovers). Call it holding
    the home lock. Runs started without cascade's tags (the UI's) are left to their launcher, and
    while any run is still in progress nothing is removed (it may be writing those folders).
    Returns one line for the user, None when there was nothing to recover."""
    from dagster import DagsterRunStatus, RunsFilter

    from assets.publish import clean_leftovers

    dead, running = [], []
    for run in instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING])):
        pid, host = run.tags.get(PID_TAG), run.tags.get(HOST_TAG)
        if pid and pid.isdigit() and host == socket.gethostname() \
                and (int(pid) == os.getpid() or not _alive(int(pid))):
            instance.report_run_failed(run, message=f"cascade: the process running it (pid {pid}) was gone "
                                                    "when the next run started (killed)")
            dead.append(run.run_id[:8])
        else:
            running.append(run.run_id[:8])
    removed = [] if running else clean_leftovers(home)
    if not removed and not dead:
        return None
    parts = ([f"marked {len(dead)} interrupted run(s) failed ({', '.join(dead)})"] if dead else []) + \
        ([f"removed {len(removed)} temporary folder(s) ({', '.join(p.name for p in removed)})"] if removed else [])
    return "cascade run: recovered from an interrupted run: " + "; ".join(parts)
