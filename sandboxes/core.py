"""One sandboxed execution: build the bwrap command line, run it with a deadline and
capped output, classify the outcome, sweep the slot's uid. See the package docstring."""

from __future__ import annotations

import functools
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandboxes import seccomp
from sandboxes.slots import acquire_slot, sweep_uid

STATUSES = ("ok", "error", "timeout", "memory_limit", "output_limit", "sandbox_error")
_WORKDIR = "/tmp"
_PROGRAM = "/sandbox/main.py"


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock limit; the sandbox is killed when it passes."""
    cpu_s: int | None = None
    """RLIMIT_CPU in seconds; None = ceil(timeout_s) + 1 (the wall clock usually fires first)."""
    memory_mb: int = 1024
    """RLIMIT_AS (address space) in MiB."""
    file_size_mb: int = 16
    """RLIMIT_FSIZE: largest file the program may write, MiB."""
    tmpfs_mb: int = 64
    """Size of the private writable work directory (a tmpfs, so it is RAM: keep it small)."""
    max_processes: int = 32
    """RLIMIT_NPROC for the slot's uid (threads count too)."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""
    stdout_bytes: int = 1 << 20
    """Stdout cap; more output kills the run with status output_limit."""
    stderr_bytes: int = 64 << 10
    """Stderr cap; more output kills the run with status output_limit."""
    python: str | None = None
    """Interpreter to run; None = this process's base interpreter (its install is bound read-only)."""


@dataclass
class SandboxResult:
    """The verdict of one run. `ok` only when the program exited 0 and was not killed."""

    status: str
    """One of ok, error, timeout, memory_limit, output_limit, sandbox_error."""
    exit_code: int | None
    """Exit status (128+N when killed by signal N); None when the sandbox never started."""
    stdout: str = ""
    """Captured stdout (decoded with replacement, at most limits.stdout_bytes)."""
    stderr: str = ""
    """Captured stderr (at most limits.stderr_bytes)."""
    wall_ms: float = 0.0
    """Wall time of the run as seen by the parent."""
    detail: str | None = None
    """Why, for humans: which limit, which signal, what failed in the sandbox."""
    warnings: list[str] = field(default_factory=list)
    """Degraded layers (e.g. seccomp unavailable), leftovers swept after the run."""
    uid: int | None = None
    """The slot uid the program ran as (audits; tests check nothing of it survives)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict:
        return asdict(self)


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
            "--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", _WORKDIR]
    if not prefix.startswith("/usr/"):
        # Parents would be created 0700 (unreadable for the slot uid): create them 0755.
        for parent in _parent_dirs(prefix + "/x"):
            cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--perms", "0755", "--dir", str(Path(_PROGRAM).parent),
            "--perms", "0444", "--ro-bind-data", str(code_fd), _PROGRAM,
            "--remount-ro", "/", "--json-status-fd", str(status_fd),
            "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", _WORKDIR,
            "--setenv", "LANG", "C.UTF-8", "--chdir", _WORKDIR]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    # soft < hard: the soft limit sends SIGXCPU, which we can label as a CPU timeout.
    cpu = limits.cpu_s if limits.cpu_s is not None else math.ceil(limits.timeout_s) + 1
    cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
            "prlimit", f"--as={limits.memory_mb << 20}", f"--cpu={cpu}:{cpu + 1}", f"--fsize={limits.file_size_mb << 20}",
            f"--nofile={limits.max_open_files}", f"--nproc={limits.max_processes}", "--core=0", "--",
            exe, "-I", _PROGRAM]
    return cmd


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _preflight() -> str | None:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) not found: install the Debian package 'bubblewrap' (scripts/setup.sh does)"
    for tool in ("setpriv", "prlimit"):
        if shutil.which(tool) is None:
            return f"{tool} not found: install the Debian package 'util-linux'"
    if os.geteuid() != 0:
        return "the sandbox must run as root to switch each slot to its own unprivileged uid"
    return None


def run_python(code: str, stdin: str | bytes | None = None, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` as a Python program in a fresh sandbox and return its verdict.

    >>> r = run_python("print(sum(map(int, input().split())))", stdin="1 2\\n")
    >>> (r.status, r.exit_code, r.stdout) if sandbox_available() else ("ok", 0, "3\\n")
    ('ok', 0, '3\\n')
    """
    problem = _preflight()
    if problem is None:
        problem = _self_test_problem(limits.python)
    if problem is not None:
        return SandboxResult("sandbox_error", None, detail=problem)
    return _run(code, stdin, limits)


def sandbox_available(python: str | None = None) -> bool:
    """True when the sandbox works on this machine (tools present, root, self test passes)."""
    return _preflight() is None and _self_test_problem(python) is None


@functools.lru_cache(maxsize=4)
def _self_test_problem(python: str | None) -> str | None:
    """Once per process: a trivial program must come back ok, or every run is an infra error
    (so a broken setup is never mistaken for wrong model answers)."""
    result = _run("import sys; sys.stdout.write('ready')", None, SandboxLimits(timeout_s=30, python=python))
    if result.status == "ok" and result.stdout == "ready":
        return None
    return f"sandbox self test failed ({result.status}): {result.detail or ''} {result.stderr[-500:]}".strip()


def _run(code: str, stdin: str | bytes | None, limits: SandboxLimits) -> SandboxResult:
    stdin_bytes = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    warnings = [] if seccomp.filter_bpf() is not None else ["seccomp unavailable (libseccomp not found)"]
    with acquire_slot() as slot:
        fds = [_memfd("program", code.encode()), _memfd("stdin", stdin_bytes)]
        status_r, status_w = os.pipe()
        fds += [status_r, status_w]
        sec_fd = seccomp.filter_fd()
        if sec_fd is not None:
            fds.append(sec_fd)
        try:
            cmd = build_command(limits, slot.uid, fds[0], status_w, sec_fd)
            pass_fds = [fds[0], status_w] + ([sec_fd] if sec_fd is not None else [])
            start = time.monotonic()
            try:
                proc = subprocess.Popen(cmd, stdin=fds[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        pass_fds=pass_fds, start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
            except OSError as err:
                return SandboxResult("sandbox_error", None, detail=f"cannot start bwrap: {err}", warnings=warnings)
            os.close(status_w)
            fds.remove(status_w)
            out, err, killed_for = _collect(proc, limits, start)
            exit_code = proc.wait()
            exit_code = 128 - exit_code if exit_code < 0 else exit_code  # killed by us: shell convention
            wall_ms = (time.monotonic() - start) * 1000
            started = _sandbox_started(status_r)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            leftovers = sweep_uid(slot.uid)
        except (RuntimeError, OSError) as err_:
            return SandboxResult("sandbox_error", exit_code, detail=f"sweep failed: {err_}", warnings=warnings)
    result = _classify(exit_code, started, killed_for, out, err, limits)
    result.wall_ms = round(wall_ms, 2)
    result.uid = slot.uid
    result.warnings = warnings + ([f"swept {leftovers} leftover process(es)"] if leftovers else [])
    return result


def _collect(proc: subprocess.Popen, limits: SandboxLimits, start: float) -> tuple[bytes, bytes, str | None]:
    """Read stdout/stderr with caps until EOF or the deadline. Returns (out, err, killed_for)."""
    caps = {proc.stdout: limits.stdout_bytes, proc.stderr: limits.stderr_bytes}
    bufs: dict = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    killed_for = None
    with selectors.DefaultSelector() as sel:
        for stream in caps:
            sel.register(stream, selectors.EVENT_READ)
        deadline = start + limits.timeout_s
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed_for = "timeout"
                break
            for key, _ in sel.select(timeout=remaining):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[key.fileobj]
                buf += chunk
                if len(buf) > caps[key.fileobj]:
                    del buf[caps[key.fileobj]:]
                    killed_for = "output_limit"
            if killed_for:
                break
    if killed_for:
        _kill_group(proc)
    for stream in caps:
        stream.close()
    return bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr]), killed_for


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill bwrap's process group; bwrap's init then dies (--die-with-parent) and the pid
    namespace takes every process inside down with it. The uid sweep catches the rest."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


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


def _classify(exit_code: int, started: bool, killed_for: str | None, out: bytes, err: bytes,
              limits: SandboxLimits) -> SandboxResult:
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if killed_for == "timeout":
        return SandboxResult("timeout", exit_code, stdout, stderr, detail=f"wall clock > {limits.timeout_s}s")
    if killed_for == "output_limit":
        return SandboxResult("output_limit", exit_code, stdout, stderr,
                             detail=f"output over {limits.stdout_bytes} (stdout) / {limits.stderr_bytes} (stderr) bytes")
    if not started:
        return SandboxResult("sandbox_error", None, stdout, stderr, detail=f"bwrap failed to start: {stderr.strip()[-500:]}")
    if exit_code == 0:
        return SandboxResult("ok", 0, stdout, stderr)
    signum = exit_code - 128 if exit_code > 128 else None
    if signum == signal.SIGXCPU:
        return SandboxResult("timeout", exit_code, stdout, stderr, detail="CPU time limit")
    tail = stderr.strip().splitlines()[-1:] or [""]
    if tail[0].startswith("MemoryError"):  # labels a failure; can never turn one into ok
        return SandboxResult("memory_limit", exit_code, stdout, stderr, detail=f"address space > {limits.memory_mb} MiB")
    if signum == signal.SIGXFSZ:
        return SandboxResult("error", exit_code, stdout, stderr, detail=f"file size limit ({limits.file_size_mb} MiB)")
    detail = f"killed by signal {signal.Signals(signum).name}" if signum in signal.valid_signals() else f"exit code {exit_code}"
    return SandboxResult("error", exit_code, stdout, stderr, detail=detail)


__all__ = ["STATUSES", "SandboxLimits", "SandboxResult", "build_command", "run_python", "sandbox_available"]
