"""Verifier throughput: completions per second for each reward type on 1,000 completions.

    .venv/bin/python benchmarks/bench_verifiers.py [--n 1000] [--only math,swe]
    .venv/bin/python benchmarks/bench_verifiers.py --only humaneval   # code verdict split vs harness

`--only humaneval` runs bench_code_verdict.py: HumanEval's 164 canonical solutions scored by
the out-of-reach assert verdict (two sandboxes, plain data between them) side by side with the
single-process harness it replaced, and the cost ratio.

Completions are realistic mixes (correct, wrong, malformed) built from fixed seeds; each
reward is constructed and warmed up on a few rows first, so start-up costs (math-verify
workers, the embedding model, the sandbox pool) are reported separately from throughput.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any, Callable


def _math(n: int, rng: random.Random) -> tuple[list[str], dict[str, list]]:
    comps, answers = [], []
    for i in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        kind = i % 4
        ans = f"\\frac{{{a}}}{{{b}}}"
        comp = {0: f"<think>{a}/{b}</think>So \\boxed{{\\frac{{{a}}}{{{b}}}}}",
                1: f"The answer is \\boxed{{{a / b:.6f}}}",
                2: f"\\boxed{{\\frac{{{a + 1}}}{{{b}}}}}",
                3: f"I think it is {a}/{b}."}[kind]
        comps.append(comp)
        answers.append(ans)
    return comps, {"answer": answers}


def _ifeval(n: int, rng: random.Random) -> tuple[list[str], dict[str, list]]:
    ids = [["punctuation:no_comma", "change_case:english_lowercase"], ["length_constraints:number_words"],
           ["detectable_format:number_bullet_lists"]]
    kwargs = [[{}, {}], [{"relation": "at least", "num_words": 20}], [{"num_bullets": 3}]]
    words = "the quick brown fox jumps over the lazy dog and keeps running far away".split()
    comps, id_col, kw_col = [], [], []
    for i in range(n):
        k = i % 3
        text = " ".join(rng.choice(words) for _ in range(rng.randint(5, 40)))
        if k == 2:
            text = "\n".join(f"* {w}" for w in text.split()[: rng.randint(2, 4)])
        comps.append(text if i % 2 else text.capitalize() + ", done.")
        id_col.append(ids[k])
        kw_col.append(kwargs[k])
    return comps, {"instruction_id_list": id_col, "kwargs": kw_col}


def _code(n: int, rng: random.Random) -> tuple[list[str], dict[str, list]]:
    tests = json.dumps({"kind": "stdio", "cases": [{"input": f"{i} {i + 1}\n", "output": f"{2 * i + 1}\n"} for i in range(3)]})
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    bad = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    crash = "```python\nraise SystemExit(3)\n```"
    return [(good, bad, crash)[i % 3] for i in range(n)], {"tests": [tests] * n}


def _swe(n: int, rng: random.Random) -> tuple[list[str], dict[str, list]]:
    comps, golds = [], []
    for i in range(n):
        v = rng.randint(0, 50)
        gold = f"--- a/pkg/m{v}.py\n+++ b/pkg/m{v}.py\n@@ -1,2 +1,3 @@\n def f(x):\n-    return x\n+    if x is None:\n+        return 0\n+    return x + {v}\n"
        cand = {0: gold, 1: gold.replace("return 0", f"return {v}"), 2: "I could not fix it.",
                3: gold.replace(f"m{v}.py", f"n{v}.py")}[i % 4]
        comps.append(f"```diff\n{cand}```" if i % 2 == 0 else cand)
        golds.append(gold)
    return comps, {"golden_patch": golds}


DATA: dict[str, Callable[[int, random.Random], tuple[list[str], dict[str, list]]]] = {
    "math": _math, "ifeval": _ifeval, "code": _code, "swe": _swe}


def bench(name: str, n: int, batch_size: int = 256, **options: Any) -> dict[str, Any]:
    from rewards.registry import get_reward

    completions, columns = DATA[name](n, random.Random(0))
    t0 = time.perf_counter()
    reward = get_reward(name, **options)
    reward.score([None] * 4, completions[:4], **{k: v[:4] for k, v in columns.items()})  # warm-up
    startup = time.perf_counter() - t0
    reasons: dict[str, int] = {}
    t0 = time.perf_counter()
    for start in range(0, n, batch_size):
        cols = {k: v[start:start + batch_size] for k, v in columns.items()}
        for res in reward.score([None] * len(completions[start:start + batch_size]), completions[start:start + batch_size], **cols):
            reasons[res.reason] = reasons.get(res.reason, 0) + 1
    elapsed = time.perf_counter() - t0
    label = name + (f"[{','.join(f'{k}={v}' for k, v in options.items())}]" if options else "")
    return {"reward": label, "n": n, "startup_s": round(startup, 2), "seconds": round(elapsed, 2),
            "completions_per_s": round(n / elapsed, 1), "reasons": reasons}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--only", default="math,ifeval,code,swe")
    args = parser.parse_args()
    runs = []
    for name in args.only.split(","):
        if name == "humaneval":
            import bench_code_verdict

            bench_code_verdict.main([])
            continue
        runs.append(bench(name, args.n))
        if name == "swe":
            runs.append(bench(name, args.n, similarity="lexical"))
    for row in runs:
        print(json.dumps(row))
    print(f"{'reward':28} {'completions/s':>14} {'startup s':>10}")
    for row in runs:
        print(f"{row['reward']:28} {row['completions_per_s']:>14} {row['startup_s']:>10}")


if __name__ == "__main__":
    main()
