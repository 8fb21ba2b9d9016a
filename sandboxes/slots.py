"""Per-run unprivileged uids ("slots") and the sweep that kills whatever a run left behind.

Why flock files and not a counter: the CLI, pytest workers and the trainer may all run
sandboxes at once in different processes. A uid must never be shared by two live runs, or
one run's sweep would kill the other's program and RLIMIT_NPROC would count both. `flock`
locks vanish with their process, so a crash never leaks a slot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Iterator

UID_BASE = int(os.environ.get("CASCADE_SANDBOX_UID_BASE", "60000"))
"""First slot uid; slot i runs as UID_BASE + i (uid and gid)."""
NUM_SLOTS = int(os.environ.get("CASCADE_SANDBOX_SLOTS", "128"))
"""How many uids the sandbox may use on this machine (max concurrent runs)."""
LOCK_DIR = os.environ.get("CASCADE_SANDBOX_LOCK_DIR", "/tmp/cascade-sandbox-slots")
"""Host directory for slot lock files (never visible inside a sandbox)."""

_swept_once: set[int] = set()
_swept_lock = threading.Lock()


@dataclass(frozen=True)
class Slot:
    """A claimed slot: its index and the uid its program runs as."""

    index: int
    uid: int


@contextlib.contextmanager
def acquire_slot(poll_s: float = 0.005) -> Iterator[Slot]:
    """Claim a free slot (waits while all are busy); released on exit, even on errors."""
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    while True:
        for index in range(NUM_SLOTS):
            fd = os.open(os.path.join(LOCK_DIR, f"slot-{index}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            slot = Slot(index, UID_BASE + index)
            try:
                _first_use_sweep(slot.uid)
                yield slot
            finally:
                os.close(fd)  # closing the fd drops the flock
            return
        time.sleep(poll_s)


def _first_use_sweep(uid: int) -> None:
    # A previous holder that crashed mid-run may have left its program running.
    with _swept_lock:
        first = uid not in _swept_once
        _swept_once.add(uid)
    if first:
        sweep_uid(uid)


def pids_of_uid(uid: int) -> list[int]:
    """Processes whose real or effective uid is `uid` (from /proc/PID/status, which, unlike the
    owner of /proc/PID, a process cannot hide by making itself non-dumpable)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as fh:
                status = fh.read()
        except OSError:  # exited meanwhile
            continue
        start = status.find(b"\nUid:")
        if start < 0 or b"\nState:\tZ" in status:  # zombies are dead already, awaiting their reaper
            continue
        real, effective = status[start + 5: status.find(b"\n", start + 1)].split()[:2]
        if int(real) == uid or int(effective) == uid:
            pids.append(int(entry.name))
    return pids


def sweep_uid(uid: int, rounds: int = 50) -> int:
    """Kill every process of `uid`; returns how many were found. Uses kill(-1) *as that uid*
    (via setpriv), which the kernel applies to all of the uid's processes in one pass, so a
    fork bomb cannot outrun a pid-by-pid loop."""
    if uid < 1000:  # never sweep system or root uids, whatever the configuration says
        raise ValueError(f"refusing to sweep uid {uid}")
    found = 0
    for _ in range(rounds):
        pids = pids_of_uid(uid)
        if not pids:
            return found
        found = max(found, len(pids))
        subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "kill", "-s", "KILL", "--", "-1"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        time.sleep(0.01)
    remaining = pids_of_uid(uid)
    if remaining:
        raise RuntimeError(f"could not kill processes of sandbox uid {uid}: {remaining}")
    return found
