"""Sandbox benchmark: latency vs a bare interpreter, throughput 1 vs N workers.

    .venv/bin/python benchmarks/bench_sandbox.py [--runs 30] [--jobs 48]

Latency: median wall time of `run_python("pass")` against a bare `python3 -c pass`
subprocess of the *same* interpreter (target ratio <= 1.5x). Throughput: programs per
second for a batch of short CPU-bound jobs through SandboxPool with 1 worker and with
os.cpu_count() workers (scaling should approach the core count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from sandboxes.command import _python_paths
from sandboxes.core import run_python
from sandboxes.limits import SandboxLimits
from sandboxes.pool import SandboxJob, SandboxPool

_WORK = "s = 0\nfor i in range(300000):\n    s += i * i\nprint(s)"


def _median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="latency samples per side")
    parser.add_argument("--jobs", type=int, default=48, help="programs per throughput batch")
    args = parser.parse_args(argv)

    exe, _ = _python_paths(SandboxLimits())
    first = run_python("pass")  # also runs the once-per-process self test
    if first.status != "ok":
        print(f"sandbox unavailable: {first.status}: {first.detail}", file=sys.stderr)
        return 1
    bare = _median_ms(lambda: subprocess.run([exe, "-I", "-c", "pass"], check=True), args.runs)
    boxed = _median_ms(lambda: run_python("pass"), args.runs)
    print(f"latency  bare python3 -c: {bare:.1f} ms  sandboxed: {boxed:.1f} ms  ratio: {boxed / bare:.2f}x (target <= 1.5x)")

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
