"""Sandbox benchmark: a sandboxed run next to a bare `python3 -c` of the same program, and throughput.

    .venv/bin/python benchmarks/bench_sandbox.py [--runs 30] [--jobs 48]

Latency (target: sandboxed <= 1.2x bare): for each program below, `run_python(code, stdin)`
with the default SandboxLimits (memory cgroup or watchdog, every rlimit, seccomp, a slot uid,
fresh namespaces and mounts, the uid sweep after the run: everything a verifier's run pays),
against `subprocess.run([python, "-I", "-c", code], input=stdin)` of the *same* interpreter
(the sandbox's default, this venv's base interpreter; -I as in the sandbox). The two sides are
interleaved, their order alternating each round, after one warm-up run each (the sandbox's
first run starts its zygote and runs its self test); printed: best of N (the ratio the
target is about) and median, in ms, and the ratio of each. The wall time is the caller's:
from the call to the verdict (sandbox) or to the exit (bare). For reference, also the bare
interpreter with -S (no `site`: what start-up costs without the site-packages' .pth files).

Throughput: programs per second for a batch of short CPU-bound jobs through SandboxPool with
1 worker and with os.cpu_count() workers (scaling should approach the core count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

from sandboxes.command import _python_paths
from sandboxes.core import run_python
from sandboxes.limits import SandboxLimits
from sandboxes.pool import SandboxJob, SandboxPool

_WORK = "s = 0\nfor i in range(300000):\n    s += i * i\nprint(s)"
PROGRAMS = {
    "pass": ("pass", None),
    "read stdin, print": ("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "1 2 3 4 5\n"),
    "300k-step loop": (_WORK, None),
}


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def compare(code: str, stdin: str | None, runs: int, exe: str) -> dict[str, list[float]]:
    """Wall ms of each side over `runs` interleaved rounds (order alternating)."""
    data = stdin.encode() if stdin is not None else b""

    def bare() -> None:
        subprocess.run([exe, "-I", "-c", code], input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)

    def boxed() -> None:
        result = run_python(code, stdin)
        assert result.ok, result

    def no_site() -> None:
        subprocess.run([exe, "-I", "-S", "-c", code], input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)

    sides = {"bare": bare, "sandboxed": boxed, "bare -S": no_site}
    for fn in sides.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(runs):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            times[name].append(_timed(sides[name]))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="interleaved rounds per program")
    parser.add_argument("--jobs", type=int, default=48, help="programs per throughput batch")
    args = parser.parse_args(argv)

    exe, _ = _python_paths(SandboxLimits())
    first = run_python("pass")  # starts the zygote, runs the once-per-process self test
    if first.status != "ok":
        print(f"sandbox unavailable: {first.status}: {first.detail}", file=sys.stderr)
        return 1
    print(f"interpreter: {exe}; {args.runs} interleaved rounds; best of N / median, ms")
    print(f"{'program':<20} {'bare python3 -c':>17} {'sandboxed':>17} {'ratio':>13}   {'bare -S (ref.)':>15}")
    for name, (code, stdin) in PROGRAMS.items():
        times = compare(code, stdin, args.runs, exe)
        best = {side: min(values) for side, values in times.items()}
        median = {side: statistics.median(values) for side, values in times.items()}
        print(f"{name:<20} {best['bare']:7.1f} / {median['bare']:7.1f} {best['sandboxed']:7.1f} / {median['sandboxed']:7.1f} "
              f"{best['sandboxed'] / best['bare']:5.2f}x / {median['sandboxed'] / median['bare']:4.2f}x"
              f"   {best['bare -S']:6.1f} / {median['bare -S']:6.1f}")
    print("target: sandboxed <= 1.2x bare (best of N)")

    cores = os.cpu_count() or 1
    rates = {}
    for workers in sorted({1, cores}):
        with SandboxPool(max_workers=workers) as pool:
            start = time.perf_counter()
            results = pool.map([SandboxJob(_WORK)] * args.jobs)
            elapsed = time.perf_counter() - start
        assert all(r.ok for r in results), [r for r in results if not r.ok][:1]
        rates[workers] = args.jobs / elapsed
        print(f"throughput {workers:>2} worker(s): {rates[workers]:.1f} programs/s")
    if cores > 1:
        print(f"scaling 1 -> {cores} workers: {rates[cores] / rates[1]:.2f}x (ideal {cores}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
