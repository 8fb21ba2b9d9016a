"""The warm sandbox's command line (bwrap -> the zygote) and the per-run data its forks apply:
every rlimit pinned (soft = hard). See the package docstring for the why."""

from __future__ import annotations

import math
import os
import resource
import shutil
import sys
from pathlib import Path

from sandboxes import seccomp
from sandboxes.limits import SandboxLimits

WORKDIR = "/tmp"
PROGRAM = "/sandbox/main.py"
_ZYGOTE_SOURCE = Path(__file__).with_name("zygote_main.py")
STACK_BYTES = 8 << 20
"""RLIMIT_STACK of sandboxed programs (soft = hard): the usual default, fixed so that it cannot be raised."""

# Limits the sandbox does not choose itself: pinned at this process's soft value, soft = hard,
# so the program can lower them but never raise them.
# Linux numbers (Python's resource module lacks RLIMIT_LOCKS (10) and RLIMIT_RTTIME (15)).
_INHERITED = (10, resource.RLIMIT_MEMLOCK, resource.RLIMIT_MSGQUEUE, resource.RLIMIT_NICE, resource.RLIMIT_RSS,
              resource.RLIMIT_RTPRIO, 15, resource.RLIMIT_SIGPENDING)


def _python_paths(limits: SandboxLimits) -> tuple[str, str]:
    """(interpreter path, install prefix to bind)."""
    if limits.python:
        exe = os.path.realpath(shutil.which(limits.python) or limits.python)
        return exe, str(Path(exe).parent.parent)
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


def _parent_dirs(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def rlimits(limits: SandboxLimits) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for every resource: soft = hard (a program may lower a limit, never
    raise one). The one exception is CPU: soft < hard, because the soft limit sends SIGXCPU, which
    we can label as a CPU timeout; raising the soft limit to the hard one gains nothing a program
    cannot already get by ignoring SIGXCPU, and the hard limit (SIGKILL) and the wall clock still hold."""
    space = (limits.address_space_mb or limits.memory_mb) << 20
    cpu = limits.cpu_s if limits.cpu_s is not None else math.ceil(limits.timeout_s) + 1
    chosen = {resource.RLIMIT_AS: space, resource.RLIMIT_DATA: space, resource.RLIMIT_STACK: STACK_BYTES,
              resource.RLIMIT_FSIZE: limits.file_size_mb << 20, resource.RLIMIT_NOFILE: limits.max_open_files,
              resource.RLIMIT_NPROC: limits.max_processes, resource.RLIMIT_CORE: 0}
    pinned = [(number, value, value) for number, value in chosen.items()]
    pinned += [(number, resource.getrlimit(number)[0], resource.getrlimit(number)[0]) for number in _INHERITED]
    return pinned + [(resource.RLIMIT_CPU, cpu, cpu + 1)]


def zygote_key(limits: SandboxLimits) -> str:
    """Runs of the same interpreter share one zygote."""
    return _python_paths(limits)[0]


def zygote_command(limits: SandboxLimits, control_fd: int) -> list[str]:
    """The warm sandbox's argv: bwrap (namespaces, read-only mounts, cleared environment) -> the
    zygote (sandboxes/zygote_main.py). Every writable place, the uid drop, the rlimits and
    seccomp are made per run, inside, by the zygote's forks."""
    exe, prefix = _python_paths(limits)
    cmd = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--hostname", "sandbox",
           "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = Path("/", name)
        if target.is_symlink():
            cmd += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            cmd += ["--ro-bind", str(target), str(target)]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev", "--perms", "1777", "--dir", WORKDIR]
    if not prefix.startswith("/usr/"):
        # Parents would be created 0700 (unreadable for the slot uid): create them 0755.
        for parent in _parent_dirs(prefix + "/x"):
            cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", prefix, prefix]
    bpf = seccomp.filter_bpf() or b""
    cmd += ["--perms", "0755", "--dir", str(Path(PROGRAM).parent), "--remount-ro", "/",
            "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", WORKDIR,
            "--setenv", "LANG", "C.UTF-8", "--chdir", WORKDIR,
            exe, "-I", "-c", _ZYGOTE_SOURCE.read_text(encoding="utf-8"), str(control_fd), bpf.hex()]
    return cmd


def memfd(name: str, data: bytes) -> int:
    """An in-memory file holding `data`, positioned at its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def preflight() -> str | None:
    """Why the sandbox cannot work on this machine, or None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) not found: install the Debian package 'bubblewrap' (scripts/setup.sh does)"
    if shutil.which("setpriv") is None:  # the sweep kills a slot's leftovers as that uid
        return "setpriv not found: install the Debian package 'util-linux'"
    if os.geteuid() != 0:
        return "the sandbox must run as root to switch each slot to its own unprivileged uid"
    return None
