"""Case lists for every verifier: honest answers that must be paid, red-team answers that must not.

A verifier fails in two directions: it pays a wrong answer (a red-team case) or it refuses a
right one (a false negative, which teaches the policy to avoid honest forms). Both lists live
here so that tests/rewards/test_honest_answers.py and tests/redteam/test_redteam_suites.py assert
them and benchmarks/bench_reward_suites.py reports per reward: red-team pay rate, honest pass rate.
The code reward's name attacks are in tests/redteam/code_name_cases.py and are folded in here.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from tests.redteam.code_name_cases import ATTACKS as CODE_NAME_ATTACKS
from tests.redteam.code_name_cases import CONTROLS as CODE_NAME_CONTROLS


@dataclass(frozen=True)
class Case:
    """One completion for one verifier and what it must score."""

    reward: str
    id: str
    completion: str
    columns: dict[str, Any]
    prompt: Any = None
    want: float = 1.0
    """Honest cases: the exact score. Red-team cases: the most the attack may earn (0)."""
    tags: tuple[str, ...] = field(default=())


def _math(id: str, completion: str, answer: str, prompt: str | None = None, want: float = 1.0) -> Case:
    return Case("math", id, completion, {"answer": answer}, prompt, want)


def _code(id: str, program: str, tests: str, prompt: Any = None, want: float = 1.0) -> Case:
    return Case("code", id, program if "```" in program else f"```python\n{program}\n```", {"tests": tests}, prompt, want)


def _ifeval(id: str, completion: str, ids: list[str], kwargs: list[dict], want: float = 1.0) -> Case:
    return Case("ifeval", id, completion, {"instruction_id_list": ids, "kwargs": kwargs}, None, want)


GOLD_PATCH = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
WRONG_PATCH = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return 0\n"
SCHEMA = json.dumps({"type": "object", "additionalProperties": False, "required": ["name", "age"],
                     "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}})
CALL = json.dumps({"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}})
ADD_TESTS = json.dumps({"kind": "assert", "entry_point": "add", "asserts": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]})
SUM_STDIO = json.dumps({"kind": "stdio", "cases": [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6\n"}]})
FLOAT_STDIO = json.dumps({"kind": "stdio", "float_tol": 1e-6, "cases": [{"input": "2\n", "output": "1.4142135624\n"}]})
LONG_REASONING = "Let me work through this carefully. " * 300

HONEST: list[Case] = [
    # math: the last box is the answer; equivalent forms; the question restated around the answer
    _math("self_correction", "It is \\boxed{3}, or rather \\boxed{4}.", "4"),
    _math("self_correction_after_think", "<think>\\boxed{5}?</think>First \\boxed{2}; no: \\boxed{3}", "3"),
    _math("half_as_decimal", "\\boxed{0.5}", "\\frac{1}{2}"),
    _math("half_as_fraction", "\\boxed{\\frac{1}{2}}", "0.5"),
    _math("half_as_slash", "\\boxed{1/2}", "\\frac{1}{2}"),
    _math("dfrac", "\\boxed{\\dfrac{3}{4}}", "3/4"),
    _math("sqrt8_for_2sqrt2", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}"),
    _math("2sqrt2_for_sqrt8", "\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
    _math("set_reordered", "\\boxed{\\{3, 1, 2\\}}", "\\{1, 2, 3\\}"),
    _math("interval", "\\boxed{(0, 1]}", "(0,1]"),
    _math("equation_rhs", "\\boxed{x = 5}", "5"),
    _math("restates_question", "We need $2^{10}$, which is $2^{10} = \\boxed{1024}$.", "1024", prompt="What is $2^{10}$?"),
    _math("choice_from_question", "\\boxed{\\frac{1}{2}}", "1/2", prompt="Pick: (A) $\\frac{1}{2}$ (B) $\\frac{1}{3}$"),
    _math("long_valid", f"<think>{LONG_REASONING}</think>{LONG_REASONING}So the answer is \\boxed{{42}}.", "42"),
    _math("format_note_then_answer", "I will write it as \\boxed{}. The answer: \\boxed{7}", "7"),
    _math("text_unit", "\\boxed{12\\text{ cm}}", "12"),
    # code
    _code("assert_plain", "def add(a, b):\n    return a + b", ADD_TESTS),
    _code("self_correction", "First try:\n```python\ndef add(a, b):\n    return a - b\n```\nFixed:\n"
                             "```python\ndef add(a, b):\n    return a + b\n```", ADD_TESTS),
    _code("long_valid", f"<think>{LONG_REASONING}</think>Explanation. {LONG_REASONING}\n"
                        "```python\ndef add(a, b):\n    # the sum\n    return a + b\n```", ADD_TESTS),
    _code("stdio_trailing_space", "a, b = map(int, input().split())\nprint(a + b, end='  \\n\\n')", SUM_STDIO),
    _code("stdio_float_tol", "import math\nprint(f'{math.sqrt(int(input())):.9f}')", FLOAT_STDIO),
    *[_code(f"names_{c.id}", c.program, c.tests, c.prompt) for c in CODE_NAME_CONTROLS],
    # ifeval
    _ifeval("no_comma_long", "Plain words only here. " * 80, ["punctuation:no_comma"], [{}]),
    _ifeval("lowercase_after_think", "<think>Plan: Write It Lowercase.</think>all of this is lowercase text.",
            ["change_case:english_lowercase"], [{}]),
    _ifeval("at_least_words", "word " * 120, ["length_constraints:number_words"], [{"num_words": 100, "relation": "at least"}]),
    _ifeval("keywords_any_case", "The OCEAN is vast and the Moon pulls the tides.", ["keywords:existence"],
            [{"keywords": ["ocean", "moon"]}]),
    _ifeval("postscript", "Here is my letter.\n\nP.S. See you soon.", ["detectable_content:postscript"],
            [{"postscript_marker": "P.S."}]),
    _ifeval("json_fenced", '```json\n{"a": 1, "b": [1, 2]}\n```', ["detectable_format:json_format"], [{}]),
    _ifeval("end_phrase", "All done. Is there anything else I can help with?", ["startend:end_checker"],
            [{"end_phrase": "Is there anything else I can help with?"}]),
    _ifeval("two_instructions", "a short reply without commas", ["punctuation:no_comma", "change_case:english_lowercase"],
            [{}, {}]),
    # swe (lexical scorer: no model download)
    Case("swe", "golden", f"```diff\n{GOLD_PATCH}```", {"golden_patch": GOLD_PATCH}),
    Case("swe", "self_correction", f"```diff\n{WRONG_PATCH}```\nNo, this one:\n```diff\n{GOLD_PATCH}```",
         {"golden_patch": GOLD_PATCH}),
    Case("swe", "git_headers", f"<think>{LONG_REASONING}</think>```diff\ndiff --git a/calc.py b/calc.py\n"
         f"index 1234567..89abcde 100644\n{GOLD_PATCH}```", {"golden_patch": GOLD_PATCH}),
    # mcqa
    Case("mcqa", "self_correction", "The answer is (A). Wait, that ignores friction. The answer is (C).", {"answer": "C"}),
    Case("mcqa", "prose_with_article", "The answer is a bit subtle. Answer: C", {"answer": "C"}),
    Case("mcqa", "letter_then_article", "Answer: B, a classic result.", {"answer": "B"}),
    Case("mcqa", "lower_in_parens", "The answer is (b).", {"answer": "B"}),
    Case("mcqa", "bold_alone", "**D.**", {"answer": "D"}),
    Case("mcqa", "long_valid", f"<think>{LONG_REASONING}</think>{LONG_REASONING}Answer: A", {"answer": "A"}),
    # structured output
    Case("structured_output", "pretty_reordered", '{\n  "age": 30,\n  "name": "Ana"\n}', {"json_schema": SCHEMA}),
    Case("structured_output", "fenced_after_think", '<think>{"x": 1}</think>```json\n{"name": "Ana", "age": 30}\n```',
         {"json_schema": SCHEMA}),
    # tool call
    Case("tool_call", "reordered_args", '<tool_call>{"arguments": {"label": "tea", "minutes": 5}, "name": "set_timer"}</tool_call>',
         {"reference_call": CALL}),
    Case("tool_call", "prose_around", 'Setting it now.\n<tool_call>\n{"name": "set_timer", "arguments": {"minutes": 5.0, '
         '"label": "tea"}}\n</tool_call>\nDone.', {"reference_call": CALL}),
]

RED_TEAM: list[Case] = [
    # math: spraying earns what the last box earns; restating; bombs
    _math("spray_wrong_last", "".join(f"\\boxed{{{i}}}" for i in range(1, 10)), "3", want=0.0),
    _math("right_then_wrong", "\\boxed{3} or maybe \\boxed{5}", "3", want=0.0),
    _math("nested_boxes", "\\boxed{" * 3000 + "3" + "}" * 3000, "3", want=0.0),
    _math("only_in_think", "<think>\\boxed{3}</think>", "3", want=0.0),
    _math("unclosed_think", "<think>\\boxed{3}", "3", want=0.0),
    _math("restated_expression", "\\boxed{2^{10}}", "1024", prompt="What is $2^{10}$?", want=0.0),
    _math("python_in_box", "\\boxed{__import__('os').system('false')}", "0", want=0.0),
    _math("superstring", "\\boxed{34}", "3", want=0.0),
    _math("infinity", "\\boxed{\\infty}", "3", want=0.0),
    # code: names the tests resolve
    *[_code(f"names_{c.id}", c.program, c.tests, c.prompt, want=0.0) for c in CODE_NAME_ATTACKS],
    # ifeval: empty or invisible text meets negative constraints; padding
    _ifeval("empty", "", ["punctuation:no_comma"], [{}], want=0.0),
    _ifeval("zero_width", "\u200b\u200b", ["change_case:english_lowercase"], [{}], want=0.0),
    _ifeval("only_think", "<think>no commas here</think>", ["punctuation:no_comma"], [{}], want=0.0),
    _ifeval("padding", "x " * 20_000, ["length_constraints:number_words"], [{"num_words": 10, "relation": "at least"}],
            want=0.0),
    # swe
    Case("swe", "golden_in_think", f"<think>```diff\n{GOLD_PATCH}```</think>no patch", {"golden_patch": GOLD_PATCH}, want=0.0),
    Case("swe", "golden_then_noop", f"```diff\n{GOLD_PATCH}```\n```diff\n--- a/calc.py\n+++ b/calc.py\n```",
         {"golden_patch": GOLD_PATCH}, want=0.0),
    # mcqa
    Case("mcqa", "every_letter", "Answer: A, B, C or D", {"answer": "B"}, want=0.0),
    Case("mcqa", "hedge", "Answer: B or C", {"answer": "B"}, want=0.0),
    Case("mcqa", "right_then_wrong", "Answer: B\nAnswer: A", {"answer": "B"}, want=0.0),
    Case("mcqa", "bare_letters", "A B C D", {"answer": "B"}, want=0.0),
    # structured output
    Case("structured_output", "json_in_prose", 'Sure: {"name": "Ana", "age": 30}', {"json_schema": SCHEMA}, want=0.0),
    Case("structured_output", "deep_nesting", "[" * 100_000 + "]" * 100_000, {"json_schema": SCHEMA}, want=0.0),
    Case("structured_output", "wrong_type", '{"name": "Ana", "age": "30"}', {"json_schema": SCHEMA}, want=0.0),
    # tool call
    Case("tool_call", "args_as_string", '<tool_call>{"name": "set_timer", "arguments": "{\\"minutes\\": 5}"}</tool_call>',
         {"reference_call": CALL}, want=0.0),
    Case("tool_call", "two_calls", '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}}</tool_call>'
         '<tool_call>{"name": "set_timer", "arguments": {"minutes": 6, "label": "tea"}}</tool_call>',
         {"reference_call": CALL}, want=0.0),
    Case("tool_call", "deep_arguments", '<tool_call>{"name": "set_timer", "arguments": {"minutes": '
         + "[" * 100_000 + "]" * 100_000 + "}}</tool_call>", {"reference_call": CALL}, want=0.0),
]


def build_rewards(workers: int = 2) -> dict[str, Any]:
    """One instance of every verifier the suites cover (call `close_rewards` when done)."""
    from rewards.code import CodeReward, CodeRewardConfig
    from rewards.ifeval import IFEvalReward
    from rewards.math import MathReward, VerifierPool
    from rewards.multi_domain import MCQAReward, StructuredOutputReward, ToolCallReward
    from rewards.swe import SweReward

    return {"math": MathReward(pool=VerifierPool(workers=workers, timeout_s=30.0)),
            "code": CodeReward(CodeRewardConfig(max_workers=workers)), "ifeval": IFEvalReward(),
            "swe": SweReward(similarity="lexical"), "mcqa": MCQAReward(), "structured_output": StructuredOutputReward(),
            "tool_call": ToolCallReward()}


def close_rewards(rewards: dict[str, Any]) -> None:
    for reward in rewards.values():
        if hasattr(reward, "close"):
            reward.close()


def score_cases(rewards: dict[str, Any], cases: list[Case]) -> dict[str, Any]:
    """RewardResult per case id, one batch per verifier."""
    out: dict[str, Any] = {}
    for name, reward in rewards.items():
        mine = [c for c in cases if c.reward == name]
        if not mine:
            continue
        columns = {key: [c.columns[key] for c in mine] for key in mine[0].columns}
        results = reward.score([c.prompt for c in mine], [c.completion for c in mine], **columns)
        out.update({f"{name}/{c.id}": r for c, r in zip(mine, results)})
    return out


@contextlib.contextmanager
def scored(cases: list[Case]) -> Iterator[dict[str, Any]]:
    """`score_cases` of `cases` on fresh verifiers, closed afterwards; without a sandbox the code
    cases are left out (their tests skip)."""
    from sandboxes.core import sandbox_available

    rewards = build_rewards()
    if not sandbox_available():
        rewards.pop("code")
    try:
        yield score_cases(rewards, cases)
    finally:
        close_rewards(rewards)
