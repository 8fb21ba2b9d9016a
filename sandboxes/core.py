"""One sandboxed execution: `run_python` runs a program to its end and returns its verdict.
The pieces (command line, slot, memory guard, capped output, classification, sweep) live in
sandboxes.command and sandboxes.launch, shared with the interactive sandboxes.session. See the
package docstring."""

from __future__ import annotations

import functools

from sandboxes.command import preflight
from sandboxes.launch import Launch
from sandboxes.limits import SandboxLimits, SandboxResult


def run_python(code: str, stdin: str | bytes | None = None, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` as a Python program in a fresh sandbox and return its verdict.

    >>> r = run_python("print(sum(map(int, input().split())))", stdin="1 2\\n")
    >>> (r.status, r.exit_code, r.stdout) if sandbox_available() else ("ok", 0, "3\\n")
    ('ok', 0, '3\\n')
    """
    problem = sandbox_problem(limits.python)
    if problem is not None:
        return SandboxResult("sandbox_error", None, detail=problem)
    return _run(code, stdin, limits)


def sandbox_available(python: str | None = None) -> bool:
    """True when the sandbox works on this machine (tools present, root, self test passes)."""
    return sandbox_problem(python) is None


def sandbox_problem(python: str | None = None) -> str | None:
    """Why no program can run in the sandbox here (a sandbox_error detail), or None."""
    return preflight() or _self_test_problem(python)


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
    return Launch(code, limits, stdin_bytes).finish()


__all__ = ["run_python", "sandbox_available", "sandbox_problem"]
