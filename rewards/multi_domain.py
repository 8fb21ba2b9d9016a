"""Cascade 2 multi-domain RL rewards (arXiv 2603.19220): MCQA, structured output, tool calls.

One `multi_domain` GRPO stage mixes three domains, each with its own verifier. Every reward
scores only what follows the last `</think>` (an unclosed `<think>` block has no answer), and
scores a row of another domain `None` ("other_domain": not applicable, so a weighted sum of the
three rewards is the row's own reward) when the row carries a `domain` column.

- `mcqa`: the chosen letter must equal the row's `answer`. A letter counts only when declared
  (`Answer: B`, `The answer is (B)`, `\\boxed{B}`) or when the whole answer is the letter
  (`B`, `(B)`, `**B.**`). The last declaration is the answer, as the math reward's last box
  (`Answer: A ... no, Answer: C` is C): repeating declarations earns what the last one alone
  earns. One declaration of several letters (`A or B`, `A, B, C, D`) scores 0
  (`multiple_answers`), so hedging never pays. Letters are capitals (or `(b)`), so prose like
  "the answer is a bit subtle" declares nothing.
- `structured_output`: the whole answer (optionally one ```json fence) must parse as JSON and
  validate against the row's `json_schema` with the `jsonschema` library (Draft 2020-12). JSON
  inside prose, duplicate keys and NaN/Infinity are rejected; extra keys and wrong types fail
  when the schema says so (our samples set `additionalProperties: false`). A schema whose
  `$ref` points outside itself (a URL, a file) is `bad_schema`: nothing is fetched.
- `tool_call`: exactly one `<tool_call>{"name", "arguments"}</tool_call>` block whose name equals
  the reference's and whose arguments, parsed as JSON, equal the reference's arguments with
  strict types (`1` is not `true` nor `"1"`; arguments given as a JSON string score 0).

Why strict: each relaxation is something a reward-hacking policy finds (tests/redteam/
test_redteam_multi_domain.py tries them).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rewards.base import Reward, RewardResult

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
LETTERS = "ABCDEFGHIJ"
# Letters are capitals (or a lowercase one in parentheses): "the answer is a bit subtle" is prose.
_DECLARED = re.compile(
    r"(?:\b(?i:answer)\b(?:\s+(?i:is))?\s*[:：]?|\\boxed\{)\s*\**\s*"
    r"((?:(?:\([A-Ja-j]\)|\(?[A-J]\)?)(?![A-Za-z0-9])[\s,/&]*(?:\b(?i:and|or)\b\s*)?)+)")
_LETTER = re.compile(r"(?<![A-Za-z])([A-J])(?![A-Za-z])")
_ALONE = re.compile(r"^[\s*_`]*\(?\s*([A-J])\s*[).:]?[\s*_`.]*$")
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def answer_text(completion: str) -> str | None:
    """The scored part: text after the last `</think>`; None when a `<think>` is left open."""
    if THINK_CLOSE in completion:
        return completion[completion.rfind(THINK_CLOSE) + len(THINK_CLOSE):]
    if THINK_OPEN in completion:
        return None
    return completion


class _DomainReward(Reward):
    """The prelude the three rewards share, in this order: a row of another domain scores None,
    a row whose reference column is unusable is an infra error (`_reference`), a completion that
    leaves `<think>` open scores 0; `_score_answer` judges the text after `</think>`."""

    domains: tuple[str, ...] = ()

    def _score_one(self, prompt: Any, completion: str, row: dict[str, Any]) -> RewardResult:
        domain = row.get("domain")
        if domain and domain not in self.domains:
            return RewardResult(None, "other_domain")
        reference = self._reference(row)
        if isinstance(reference, RewardResult):
            return reference
        answer = answer_text(completion)
        if answer is None:
            return RewardResult(0.0, "unclosed_think")
        return self._score_answer(answer, reference)

    def _reference(self, row: dict[str, Any]) -> Any:
        """What the answer is judged against, or the RewardResult for an unusable row."""
        raise NotImplementedError

    def _score_answer(self, answer: str, reference: Any) -> RewardResult:
        raise NotImplementedError


def chosen_letter(answer: str) -> tuple[str | None, str]:
    """(letter, reason): the one letter the answer commits to, or None with why not."""
    last = None
    for last in _DECLARED.finditer(answer):
        pass  # the last declaration is the answer: an honest self-correction is paid
    declared = set(_LETTER.findall(last.group(1).upper())) if last else set()
    if not declared:
        alone = _ALONE.match(answer)
        declared = {alone.group(1)} if alone else set()
    if not declared:
        return None, "no_answer"
    if len(declared) > 1:
        return None, "multiple_answers"
    return declared.pop(), "chosen"


class MCQAReward(_DomainReward):
    """Multiple-choice QA: 1 when the one declared letter after `</think>` is the row's `answer`."""

    name = "mcqa"
    domains = ("mcqa",)

    def _reference(self, row: dict[str, Any]) -> str | RewardResult:
        reference = str(row.get("answer") or "").strip().strip("()").upper()
        if reference not in LETTERS or not reference:
            return RewardResult(0.0, "missing_column:answer", True)
        return reference

    def _score_answer(self, answer: str, reference: str) -> RewardResult:
        letter, reason = chosen_letter(answer)
        if letter is None:
            return RewardResult(0.0, reason)
        return RewardResult(1.0, "correct") if letter == reference else RewardResult(0.0, "wrong_answer", detail=letter)


def _no_constants(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def strict_json(text: str) -> Any:
    """`json.loads` that rejects duplicate keys and NaN/Infinity (ValueError)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constants)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


class StructuredOutputReward(_DomainReward):
    """Structured output: 1 when the whole answer is JSON valid against the row's `json_schema`."""

    name = "structured_output"
    domains = ("structured_output",)

    def _reference(self, row: dict[str, Any]) -> Any:
        import jsonschema

        from referencing import Registry

        try:
            schema = json.loads(row.get("json_schema") or "")
            _local_refs_only(schema)
            # An empty registry: nothing is ever fetched (a `$ref` to a URL or a file).
            validator = jsonschema.Draft202012Validator(schema, registry=Registry())
            validator.check_schema(schema)
        except (ValueError, RecursionError, jsonschema.SchemaError) as err:
            return RewardResult(0.0, "bad_schema", True, str(err)[:200])
        return validator

    def _score_answer(self, answer: str, validator: Any) -> RewardResult:
        text = answer.strip()
        fence = _FENCE.match(text)
        text = fence.group(1).strip() if fence else text
        try:
            value = strict_json(text)
        except ValueError as err:
            return RewardResult(0.0, "not_json", detail=str(err)[:200])
        try:
            error = next(iter(validator.iter_errors(value)), None)
        except RecursionError:  # a recursive schema over a deeply nested answer
            return RewardResult(0.0, "schema_violation", detail="nested too deeply")
        if error is not None:
            return RewardResult(0.0, "schema_violation", detail=error.message[:200])
        return RewardResult(1.0, "valid")


def _local_refs_only(schema: Any) -> None:
    """ValueError for a `$ref`/`$dynamicRef` that is not a fragment of the schema itself."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in ("$ref", "$dynamicRef"):
                if key in node and not str(node[key]).startswith("#"):
                    raise ValueError(f"{key} {str(node[key])[:80]!r} is not local to the schema")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def same_json(a: Any, b: Any) -> bool:
    """Equality of parsed JSON with strict types: bool is not int, int 1 equals float 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isfinite(a) and math.isfinite(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


class ToolCallReward(_DomainReward):
    """Tool use: 1 when the one `<tool_call>` names the reference tool with equal JSON arguments."""

    name = "tool_call"
    domains = ("tool_call",)

    def _reference(self, row: dict[str, Any]) -> tuple[Any, Any] | RewardResult:
        try:
            reference = json.loads(row.get("reference_call") or "")
            return reference["name"], reference.get("arguments", {})
        except (ValueError, TypeError, KeyError) as err:
            return RewardResult(0.0, "missing_column:reference_call", True, str(err)[:200])

    def _score_answer(self, answer: str, reference: tuple[Any, Any]) -> RewardResult:
        ref_name, ref_args = reference
        if answer.count("<tool_call>") != answer.count("</tool_call>"):
            return RewardResult(0.0, "bad_tool_call")
        blocks = _CALL.findall(answer)
        if not blocks:
            return RewardResult(0.0, "no_tool_call")
        if len(blocks) > 1:
            return RewardResult(0.0, "multiple_calls")
        try:
            call = strict_json(blocks[0].strip())
        except ValueError as err:
            return RewardResult(0.0, "bad_tool_call", detail=str(err)[:200])
        if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
            return RewardResult(0.0, "bad_tool_call", detail="a call is exactly {name, arguments}")
        if call["name"] != ref_name:
            return RewardResult(0.0, "wrong_tool", detail=str(call["name"])[:80])
        if not isinstance(call["arguments"], dict):
            return RewardResult(0.0, "arguments_not_object")
        try:
            same = same_json(call["arguments"], ref_args)
        except RecursionError:
            same = False
        if not same:
            return RewardResult(0.0, "wrong_arguments")
        return RewardResult(1.0, "correct")
