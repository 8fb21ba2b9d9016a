"""One memory limit for the whole process tree of a run (`SandboxLimits.memory_mb`).

RLIMIT_AS caps each process alone: a program forking 8 children of 600 MiB each used 4.6 GiB
under a 1 GiB limit. The run's total is capped by, best first:

1. a memory cgroup (v2 `memory.max`, else v1 `memory.limit_in_bytes`), when this process can
   create one and a probe shows the kernel enforces it (sandboxes.cgroups);
2. else a watchdog thread in the parent: every WATCH_INTERVAL_S it sums the RSS of every
   process of the run's slot uid (every process of a run runs as that uid, forks included)
   and kills the run when the sum passes the limit. RSS counts a page shared between processes
   (libraries, copy-on-write memory after fork) in each of them, so before killing it confirms
   with the PSS sum (each shared page split between its users), which counts every page once.
   Its gaps, compared to a cgroup: it acts after the fact (a run can overshoot by what it
   allocates in one interval, ~10 ms), files in the sandbox's tmpfs are not process memory
   (they are capped apart by tmpfs_mb), and neither is kernel memory.

Both end the run as `memory_limit`. Set CASCADE_SANDBOX_MEMORY_GUARD=watchdog to force the
watchdog (tests of the fallback); the default, `auto`, takes the first that works.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Protocol

from sandboxes.cgroups import CgroupGuard, working_hierarchy

GUARD_ENV = "CASCADE_SANDBOX_MEMORY_GUARD"
WATCH_INTERVAL_S = 0.01
_PAGE = os.sysconf("SC_PAGE_SIZE")


class MemoryGuard(Protocol):
    """What a run needs from its memory guard."""

    kind: str
    limit_bytes: int

    def enter_fd(self) -> int | None: ...
    def start(self, kill: Callable[[], None], pid: int) -> None: ...
    def event_fd(self) -> int | None: ...
    def on_event(self) -> None: ...
    def tripped(self) -> bool: ...
    def peak_mb(self) -> float | None: ...
    def close(self) -> list[str]: ...


def guard_kind() -> str:
    """The mechanism runs get here: 'cgroup v2', 'cgroup v1' or 'watchdog'."""
    if os.environ.get(GUARD_ENV, "auto") == "watchdog":
        return "watchdog"
    hierarchy = working_hierarchy()
    return f"cgroup v{hierarchy.version}" if hierarchy else "watchdog"


def open_guard(uid: int, limit_bytes: int) -> tuple[MemoryGuard, list[str]]:
    """A guard for one run of slot `uid` (not started yet) and warnings about degraded choices."""
    if os.environ.get(GUARD_ENV, "auto") == "watchdog":
        return Watchdog(uid, limit_bytes), [f"memory limit by watchdog ({GUARD_ENV}=watchdog)"]
    hierarchy = working_hierarchy()
    if hierarchy is None:
        return Watchdog(uid, limit_bytes), ["memory limit by watchdog (no working memory cgroup)"]
    try:
        return CgroupGuard(hierarchy, str(uid), limit_bytes), []
    except OSError as err:
        return Watchdog(uid, limit_bytes), [f"memory limit by watchdog (cgroup failed: {err})"]


def _read_small(path: str, size: int = 4096) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def _identity(pid: str, uid: int) -> tuple[bool, str] | None:
    """(real or effective uid is `uid`, parent pid), from status (a process cannot hide its uid
    there the way it can hide /proc/PID's owner); None when it is gone."""
    try:
        status = _read_small(f"/proc/{pid}/status")
    except OSError:
        return None
    start, ppid = status.find(b"\nUid:"), status.find(b"\nPPid:")
    if start < 0 or ppid < 0:
        return None
    real, effective = status[start + 5: status.find(b"\n", start + 1)].split()[:2]
    return int(real) == uid or int(effective) == uid, status[ppid + 6: status.find(b"\n", ppid + 1)].strip().decode()


def _rss_bytes(pid: str) -> int:
    try:
        return int(_read_small(f"/proc/{pid}/statm", 256).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss_bytes(pid: str) -> int:
    try:
        rollup = _read_small(f"/proc/{pid}/smaps_rollup", 8192)
    except OSError:
        return 0
    start = rollup.find(b"\nPss:")
    if start < 0:
        return 0
    return int(rollup[start + 5: rollup.find(b"\n", start + 1)].split()[0]) * 1024


class Watchdog:
    """The fallback guard (see the module docstring).

    Which processes: those of the slot uid. The run's first processes (its init, and the
    program's process until it drops to the slot uid) run as root, so root processes descending
    from the run's init are re-read every tick until they switch.
    Cost per tick: one listing of /proc (entries are matched by name and inode, so only processes
    new since the last tick have their status read; the processes that existed before the run
    started are never read), one read of /proc/PID/statm per process of the run, one status read
    per root helper of the run (2-3). About 50-60 us with ~100 host processes: ~0.5 % of one
    core per running sandbox at a 10 ms interval. smaps_rollup (~40 us per process, more for big
    ones) is read only on ticks where the RSS sum is over the limit. Must be created before the
    run's first process is started (open_guard is called before Popen).
    """

    kind = "watchdog"

    def __init__(self, uid: int, limit_bytes: int, interval_s: float = WATCH_INTERVAL_S) -> None:
        self.uid = uid
        self.limit_bytes = limit_bytes
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tripped = False
        self._peak = 0
        # /proc entry -> inode, for entries already classified. Processes that exist now, before
        # the run's first process is started, cannot be part of it: not one status read for them.
        self._known: dict[str, int] = {e.name: e.inode() for e in os.scandir("/proc") if e.name.isdigit()}
        self._ours: set[str] = set()  # processes of the slot uid
        self._helpers: set[str] = set()  # root processes of the run (its init, the program before its drop)

    def enter_fd(self) -> int | None:
        """No cgroup to enter: the watchdog finds the run by its uid."""
        return None

    def start(self, kill: Callable[[], None], pid: int) -> None:
        """Watch the run whose first process is `pid`; `kill` ends the run (called at most once,
        from the watchdog thread)."""
        self.follow(pid)
        self._thread = threading.Thread(target=self._loop, args=(kill,), name=f"sandbox-memory-{self.uid}", daemon=True)
        self._thread.start()

    def follow(self, pid: int) -> None:
        """Count `pid` once it switches to the slot uid, and its descendants that do."""
        self._helpers.add(str(pid))

    def _loop(self, kill: Callable[[], None]) -> None:
        while True:
            if self.measure() > self.limit_bytes:
                self._tripped = True
                kill()
                return
            if self._stop.wait(self.interval_s):
                return

    def _discover(self) -> None:
        fresh: dict[str, tuple[bool, str]] = {}
        listed = 0
        for entry in os.scandir("/proc"):
            name = entry.name
            if not name.isdigit():
                continue
            listed += 1
            inode = entry.inode()
            known = self._known.get(name)
            if known != inode:  # new since the last tick (or a reused pid)
                self._known[name] = inode
                if known is not None:  # a reused pid: whatever it was is gone
                    self._ours.discard(name)
                    self._helpers.discard(name)
                ident = _identity(name, self.uid)
                if ident is not None:
                    fresh[name] = ident
        for name in list(self._helpers):  # helpers switching to the slot uid become the program
            ident = _identity(name, self.uid)
            if ident is None or ident[0]:
                self._helpers.discard(name)
                if ident is not None:
                    self._ours.add(name)
        changed = True
        while changed:  # parents before children, whatever order the listing had
            changed = False
            for name, (owned, ppid) in list(fresh.items()):
                if owned or ppid in self._helpers or name in self._helpers:
                    (self._ours if owned else self._helpers).add(name)
                    del fresh[name]
                    changed = True
        if len(self._known) > listed + 64:  # forget exited processes now and then
            alive = {e.name for e in os.scandir("/proc") if e.name.isdigit()}
            self._known = {k: v for k, v in self._known.items() if k in alive}
            self._ours &= alive

    def measure(self) -> int:
        """The run's memory now: the RSS sum, or the PSS sum when the RSS sum is over the limit."""
        self._discover()
        total = sum(_rss_bytes(pid) for pid in self._ours)
        if total > self.limit_bytes:
            total = sum(_pss_bytes(pid) for pid in self._ours)
        self._peak = max(self._peak, total)
        return total

    def event_fd(self) -> int | None:
        return None

    def on_event(self) -> None:
        pass

    def tripped(self) -> bool:
        return self._tripped

    def peak_mb(self) -> float | None:
        return round(self._peak / (1 << 20), 1)

    def close(self) -> list[str]:
        """Stop watching (idempotent; after it returns `kill` is never called again)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        return []
