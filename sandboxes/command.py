"""The sandbox's command line: bwrap (namespaces, mounts) -> setpriv (uid drop) -> prlimit
(every rlimit pinned, soft = hard) -> python. See the package docstring for the why."""

from __future__ import annotations

import math
import os
import resource
import shutil
import sys
from pathlib import Path

from sandboxes.limits import SandboxLimits

WORKDIR = "/tmp"
PROGRAM = "/sandbox/main.py"
STACK_BYTES = 8 << 20
"""RLIMIT_STACK of sandboxed programs (soft = hard): the usual default, fixed so that it cannot be raised."""

# Limits the sandbox does not choose itself: pinned at this process's soft value, soft = hard,
# so the program can lower them but never raise them.
# Linux numbers (Python's resource module lacks RLIMIT_LOCKS and RLIMIT_RTTIME).
_INHERITED = {"locks": 10, "memlock": resource.RLIMIT_MEMLOCK, "msgqueue": resource.RLIMIT_MSGQUEUE,
              "nice": resource.RLIMIT_NICE, "rss": resource.RLIMIT_RSS, "rtprio": resource.RLIMIT_RTPRIO,
              "rttime": 15, "sigpending": resource.RLIMIT_SIGPENDING}


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


def _pinned(value: int) -> str:
    text = "unlimited" if value == resource.RLIM_INFINITY else str(value)
    return f"{text}:{text}"


def rlimit_args(limits: SandboxLimits) -> list[str]:
    """prlimit options: every resource set, soft = hard (a program may lower a limit, never raise
    one). The one exception is CPU: soft < hard, because the soft limit sends SIGXCPU, which we can
    label as a CPU timeout; raising the soft limit to the hard one gains nothing a program cannot
    already get by ignoring SIGXCPU, and the hard limit (SIGKILL) and the wall clock still hold."""
    space = (limits.address_space_mb or limits.memory_mb) << 20
    cpu = limits.cpu_s if limits.cpu_s is not None else math.ceil(limits.timeout_s) + 1
    args = [f"--as={_pinned(space)}", f"--data={_pinned(space)}", f"--stack={_pinned(STACK_BYTES)}",
            f"--cpu={cpu}:{cpu + 1}", f"--fsize={_pinned(limits.file_size_mb << 20)}",
            f"--nofile={_pinned(limits.max_open_files)}", f"--nproc={_pinned(limits.max_processes)}", "--core=0:0"]
    for option, number in _INHERITED.items():
        args.append(f"--{option}={_pinned(resource.getrlimit(number)[0])}")
    return args


def build_command(limits: SandboxLimits, uid: int, code_fd: int, status_fd: int, seccomp_fd: int | None) -> list[str]:
    """The full argv: bwrap (namespaces, mounts) -> setpriv (uid drop) -> prlimit -> python."""
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
    cmd += ["--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", WORKDIR]
    if not prefix.startswith("/usr/"):
        # Parents would be created 0700 (unreadable for the slot uid): create them 0755.
        for parent in _parent_dirs(prefix + "/x"):
            cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--perms", "0755", "--dir", str(Path(PROGRAM).parent),
            "--perms", "0444", "--ro-bind-data", str(code_fd), PROGRAM,
            "--remount-ro", "/", "--json-status-fd", str(status_fd),
            "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", WORKDIR,
            "--setenv", "LANG", "C.UTF-8", "--chdir", WORKDIR]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
            "prlimit", *rlimit_args(limits), "--", exe, "-I", PROGRAM]
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
    for tool in ("setpriv", "prlimit"):
        if shutil.which(tool) is None:
            return f"{tool} not found: install the Debian package 'util-linux'"
    if os.geteuid() != 0:
        return "the sandbox must run as root to switch each slot to its own unprivileged uid"
    return None
