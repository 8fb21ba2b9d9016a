"""The data of the sandbox API: the limits of a run and its verdict."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock limit; the sandbox is killed when it passes (a SandboxProcess: its whole lifetime)."""
    cpu_s: int | None = None
    """RLIMIT_CPU in seconds; None = ceil(timeout_s) + 1 (the wall clock usually fires first)."""
    memory_mb: int = 1024
    """Memory of the whole run in MiB: every process and thread of it together (a cgroup, or a
    watchdog where no cgroup works; see sandboxes.memory). Going over it ends the run as memory_limit."""
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
    address_space_mb: int | None = None
    """RLIMIT_AS of each process in MiB, a second layer under memory_mb (one big allocation fails
    at once with MemoryError); None = memory_mb, so one process never maps more than the run may use."""


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
    memory_peak_mb: float | None = None
    """Peak memory of the whole run as the memory guard saw it (cgroup: its max usage; watchdog:
    the largest sum of the processes' RSS it sampled); None when not measured."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"
