"""The kernel's memory limit for a run's whole process tree: a memory cgroup per run.

Where: a child of this process's own memory cgroup (so a container's limit still covers the
sandboxes), named `cascade-sandbox-<uid>`. The slot's flock makes the name exclusive, so a
cgroup of that name found at creation is a leftover of a crashed run and is removed first.

Entering it: the run's first process (the zygote's fork, see sandboxes/zygote_main.py) writes
"0" (itself) to an fd of the cgroup's cgroup.procs (`enter_fd`) before it does anything else, so
every process of the run (its init, the program, all its forks and threads) is created inside
the cgroup: no allocation of the run can happen outside it, and no process can leave it (the
sandbox has no /sys, no capabilities, and mount/unshare are denied by seccomp). (`wrap` does the
same for a command line, through a shell: the probe below uses it.)

The cost of a move, and the warmer: moving a process between cgroups takes the kernel's
cgroup_threadgroup_rwsem for writing, which waits for an RCU grace period (6-20 ms measured
here, i.e. +35-50 % on a `print(1)` run) unless another move happened within the last grace
period or so (the rwsem then stays in its slow mode). While sandboxes are being started, a
thread of this process therefore re-writes its own thread id into its own cgroup every 5 ms
(a move to where it already is: nothing changes) and each run's move takes ~0.1 ms. It stops
after 1 s without a new run. Its cost: ~0.2 % of one core while active; meanwhile forks and
exits on the machine take the rwsem's slow read path (one more atomic operation each).

v2: memory.max, memory.swap.max = 0, memory.oom.group = 1 (an OOM kills the whole run at once),
verdict from memory.events. v1: memory.limit_in_bytes (and memsw, so swap cannot extend it), an
eventfd on memory.oom_control wakes the parent, which kills the run at once; verdict from the
OOM notification or the `oom_kill` counter. Which one works is decided once per process by a
probe (a child allocating past a small limit must be OOM-killed and the counter must say so), so
a kernel that accepts the files but does not enforce them (e.g. gVisor) falls back to the watchdog.
"""

from __future__ import annotations

import errno
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

PREFIX = "cascade-sandbox-"
WARM_INTERVAL_S = 0.005
WARM_IDLE_S = 1.0
_ENTER = 'echo $$ > "$0" && exec "$@"'


@dataclass(frozen=True)
class Hierarchy:
    """Where run cgroups are created: a directory of a v1 memory or a v2 hierarchy."""

    version: int
    parent: str
    own: str | None = None
    """This process's own cgroup in that hierarchy (the warmer's no-op target), when visible."""


def _read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def _counters(path: str) -> dict[str, int]:
    pairs = (line.split() for line in _read(path).splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def candidates() -> list[Hierarchy]:
    """The writable hierarchies with a memory controller for this process: v2 first, then v1."""
    own = {}
    for line in _read("/proc/self/cgroup").splitlines():
        num, controllers, path = line.split(":", 2)
        own["v2" if num == "0" else controllers] = path
    found: list[Hierarchy] = []
    for line in _read("/proc/self/mountinfo").splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        root, mountpoint, fstype, superopts = fields[3], fields[4], fields[sep + 1], fields[sep + 3]
        if fstype == "cgroup2" and "v2" in own:
            version, path = 2, own["v2"]
        elif fstype == "cgroup" and "memory" in superopts.split(","):
            version = 1
            path = next((p for c, p in own.items() if "memory" in c.split(",")), "/")
        else:
            continue
        rel = path[len(root):] if root != "/" and path.startswith(root) else (path if root == "/" else None)
        own = os.path.join(mountpoint, rel.lstrip("/")) if rel is not None else None
        own = own if own is not None and os.path.isdir(own) else None
        parent = own or mountpoint
        if not os.access(parent, os.W_OK):
            continue
        if version == 2 and not _v2_memory_delegated(parent):
            continue
        found.append(Hierarchy(version, parent, own))
    return sorted(found, key=lambda h: -h.version)


def _v2_memory_delegated(parent: str) -> bool:
    try:
        if "memory" not in _read(os.path.join(parent, "cgroup.controllers")).split():
            return False
        if "memory" not in _read(os.path.join(parent, "cgroup.subtree_control")).split():
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory")  # EBUSY when it holds processes
        return True
    except OSError:
        return False


def _kill_members(path: str) -> None:
    """SIGKILL every process in the cgroup, through pidfds: a pid that exits and is reused between
    reading cgroup.procs and the kill is re-checked against the cgroup, never signalled blindly."""
    try:
        pids = [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]
    except OSError:
        return
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if str(pid) in _read(os.path.join(path, "cgroup.procs")).split():
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def remove(path: str, wait_s: float = 2.0) -> bool:
    """Remove a run cgroup (killing what is still in it); True when it is gone."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
        _kill_members(path)
        time.sleep(0.005)


class _Warmer:
    """Keeps cgroup moves cheap while runs are being started (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._until = 0.0
        self._broken = False

    def touch(self, hierarchy: Hierarchy) -> None:
        """A run is starting: warm from now until WARM_IDLE_S after the last call."""
        if hierarchy.own is None:
            return
        with self._lock:
            self._until = time.monotonic() + WARM_IDLE_S
            if self._thread is None and not self._broken:
                self._thread = threading.Thread(target=self._loop, args=(hierarchy,), name="sandbox-cgroup-warmer",
                                                daemon=True)
                self._thread.start()

    def _loop(self, hierarchy: Hierarchy) -> None:
        # v1: this thread's id into `tasks` (an explicit id takes the rwsem; "0" would not).
        # v2: the process into cgroup.procs (all its threads share one cgroup there).
        name, me = ("tasks", threading.get_native_id()) if hierarchy.version == 1 else ("cgroup.procs", os.getpid())
        try:
            fd = os.open(os.path.join(hierarchy.own, name), os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            fd = None
        try:
            while fd is not None:
                with self._lock:
                    if time.monotonic() > self._until:
                        self._thread = None
                        return
                os.write(fd, str(me).encode())
                time.sleep(WARM_INTERVAL_S)
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
        with self._lock:  # cannot warm here: every move just pays its grace period
            self._broken = True
            self._thread = None

    def reset(self) -> None:
        """In a forked child: the thread is not there."""
        self._lock = threading.Lock()
        self._thread = None


_WARMER = _Warmer()
os.register_at_fork(after_in_child=_WARMER.reset)


class CgroupGuard:
    """A memory cgroup holding one run (see the module docstring)."""

    def __init__(self, hierarchy: Hierarchy, name: str, limit_bytes: int) -> None:
        _WARMER.touch(hierarchy)
        self.kind = f"cgroup v{hierarchy.version}"
        self.version = hierarchy.version
        self.limit_bytes = limit_bytes
        self.path = os.path.join(hierarchy.parent, PREFIX + name)
        self._event: int | None = None
        self._fired = False
        if not remove(self.path):
            raise OSError(errno.EBUSY, f"stale cgroup {self.path} cannot be removed")
        os.mkdir(self.path, 0o700)
        try:
            self._configure(limit_bytes)
        except BaseException:
            self.close()
            raise

    def _configure(self, limit: int) -> None:
        def optional(name: str, value: str) -> None:
            try:
                _write(os.path.join(self.path, name), value)
            except FileNotFoundError:
                pass  # e.g. no swap accounting: nothing to cap

        if self.version == 2:
            _write(os.path.join(self.path, "memory.max"), str(limit))
            optional("memory.swap.max", "0")
            optional("memory.oom.group", "1")
            return
        _write(os.path.join(self.path, "memory.limit_in_bytes"), str(limit))
        optional("memory.memsw.limit_in_bytes", str(limit))
        event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        control = os.open(os.path.join(self.path, "memory.oom_control"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            _write(os.path.join(self.path, "cgroup.event_control"), f"{event} {control}")
            self._event = event
        except OSError:
            os.close(event)  # no notification: the verdict still comes from the oom_kill counter
        finally:
            os.close(control)

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` run so that its first process is inside the cgroup before it execs anything."""
        return ["/bin/sh", "-c", _ENTER, os.path.join(self.path, "cgroup.procs"), *cmd]

    def enter_fd(self) -> int | None:
        """A write-only fd of the cgroup's process list: the run's first process writes "0" to it
        (itself) before it does anything else (the caller closes it)."""
        return os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)

    def start(self, kill: object, pid: int) -> None:
        """Nothing to start: the kernel enforces the limit."""

    def event_fd(self) -> int | None:
        """Readable when the run hits its limit (v1 OOM notification), or None."""
        return self._event

    def on_event(self) -> None:
        if self._event is not None:
            try:
                os.eventfd_read(self._event)
                self._fired = True
            except BlockingIOError:
                pass

    def tripped(self) -> bool:
        """Whether the run ran out of memory (the kernel's own counters)."""
        if self._fired:
            return True
        try:
            if self.version == 2:
                events = _counters(os.path.join(self.path, "memory.events"))
                return events.get("oom", 0) + events.get("oom_kill", 0) + events.get("oom_group_kill", 0) > 0
            return _counters(os.path.join(self.path, "memory.oom_control")).get("oom_kill", 0) > 0
        except OSError:
            return False

    def peak_mb(self) -> float | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return round(int(_read(os.path.join(self.path, name))) / (1 << 20), 1)
        except (OSError, ValueError):
            return None

    def close(self) -> list[str]:
        """Remove the cgroup (idempotent); returns warnings."""
        if self._event is not None:
            os.close(self._event)
            self._event = None
        if self.version == 2 and os.path.exists(os.path.join(self.path, "cgroup.kill")):
            try:
                _write(os.path.join(self.path, "cgroup.kill"), "1")
            except OSError:
                pass
        if remove(self.path):
            return []
        return [f"cgroup {self.path} not removed yet (removed when its slot is next used)"]


def _probe(hierarchy: Hierarchy) -> bool:
    """A child allocating 256 MiB under a 64 MiB limit must be OOM-killed, and the cgroup must say so."""
    try:
        guard = CgroupGuard(hierarchy, f"probe-{os.getpid()}", 64 << 20)
    except OSError:
        return False
    try:
        cmd = guard.wrap([sys.executable, "-I", "-S", "-c", "b = bytearray(256 << 20)"])
        try:
            code = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=20, check=False).returncode
        except (OSError, subprocess.SubprocessError):
            return False
        guard.on_event()
        return code == -signal.SIGKILL and guard.tripped()
    finally:
        guard.close()


@functools.lru_cache(maxsize=1)
def working_hierarchy() -> Hierarchy | None:
    """The first hierarchy that really enforces a memory limit here (probed once per process)."""
    if os.geteuid() != 0:
        return None
    try:
        found = candidates()
    except OSError:
        return None
    return next((h for h in found if _probe(h)), None)
