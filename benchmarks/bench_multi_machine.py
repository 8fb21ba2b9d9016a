"""The multi-machine setup's wall time next to the same curation in process, in one run.

Runs tests/e2e/test_multi_machine.py, which materializes the same targets twice: the tiny
recipe's two sources in 3 shards each (read, quarantine, decontaminate, dedup stages, assemble)
and a rejection generation in 2 shards on the tiny model (6 prompts x 2 samples x 8 tokens,
math verifier), first in this process on embedded storage (SQLite), then on two Celery workers
(separate processes and working directories standing for two machines) over redis-server with
the Dagster instance and both caches in PostgreSQL (all started by the test, stopped by PID).
The benchmarks are materialized before each timed run, outside the timing. Both runs must give
the same data versions (the test asserts it). Prints both wall times and their ratio.

On a toy-sized recipe this measures the orchestration cost of going multi-machine (a process
per step, Celery round trips, PostgreSQL event writes), not a speed-up: the work per step is a
fraction of a second.

    python benchmarks/bench_multi_machine.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "timings.json"
        env = {**os.environ, "CASCADE_MULTI_MACHINE_TIMINGS": str(out), "HF_HUB_OFFLINE": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/e2e/test_multi_machine.py", "--basetemp", str(Path(tmp) / "pytest")],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            print(done.stdout[-3000:], done.stderr[-2000:], file=sys.stderr)
            return 1
        timings = json.loads(out.read_text())
    plain, multi = timings["in_process_embedded_s"], timings["celery_postgres_s"]
    print(f"same targets, same data versions: in process on SQLite {plain:.1f} s; "
          f"2 Celery workers on PostgreSQL {multi:.1f} s; ratio {multi / plain:.2f}x")
    print("json:", json.dumps({"in_process_embedded_s": round(plain, 1), "celery_postgres_s": round(multi, 1),
                               "ratio": round(multi / plain, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
