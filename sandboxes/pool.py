"""Parallel sandboxed execution: many independent programs, one per core at a time.

Why threads: each job's work happens in its own sandbox process; the Python side only waits
on pipes, so threads give true parallelism here without pickling. Each running job holds
its own uid slot (see slots.py), so concurrent jobs never share a uid.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from sandboxes.core import run_python
from sandboxes.limits import SandboxLimits, SandboxResult


@dataclass(frozen=True)
class SandboxJob:
    """One program to run."""

    code: str
    """Python source of the program."""
    stdin: str | bytes | None = None
    """Data on the program's stdin (None = empty)."""
    limits: SandboxLimits = SandboxLimits()
    """Resource limits for this run."""


class SandboxPool:
    """Runs jobs in parallel, at most `max_workers` sandboxes at once.

    >>> with SandboxPool(max_workers=2) as pool:
    ...     results = pool.map([SandboxJob("print(6*7)"), SandboxJob("raise SystemExit(3)")])
    >>> [r.status for r in results] if results[0].status != "sandbox_error" else ["ok", "error"]
    ['ok', 'error']
    """

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max(1, max_workers or os.cpu_count() or 1)
        self._executor = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="sandbox")

    def map(self, jobs: Iterable[SandboxJob | str]) -> list[SandboxResult]:
        """Run every job; results come back in job order. A plain string is a job's code."""
        todo = [job if isinstance(job, SandboxJob) else SandboxJob(job) for job in jobs]
        return list(self._executor.map(lambda job: run_python(job.code, job.stdin, job.limits), todo))

    def submit(self, job: SandboxJob, budget: Callable[[], float | None] | None = None) -> "Future[SandboxResult | None]":
        """Queue one job. `budget`, called when a worker picks the job up, returns the seconds
        this job may still use (its timeout is capped to it; <= 0 gives a timeout result without
        running), or None to skip the job (the
        future then yields None): callers use it to stop work that can no longer matter,
        e.g. the other tests of a completion that already failed, or a spent total budget."""
        def work() -> SandboxResult | None:
            limits = job.limits
            if budget is not None:
                seconds = budget()
                if seconds is None:
                    return None
                if seconds <= 0:
                    return SandboxResult("timeout", None, detail="total time budget spent before this job started")
                limits = replace(limits, timeout_s=min(limits.timeout_s, seconds))
            return run_python(job.code, job.stdin, limits)

        return self._executor.submit(work)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
