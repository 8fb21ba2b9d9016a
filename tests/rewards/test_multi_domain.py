"""Cascade 2 multi-domain rewards: MCQA letters, JSON-schema structured output, tool calls."""

from __future__ import annotations

import json

import pytest

from rewards.multi_domain import MCQAReward, StructuredOutputReward, ToolCallReward, chosen_letter, same_json
from rewards.registry import get_reward

SCHEMA = json.dumps({"type": "object", "additionalProperties": False, "required": ["name", "age"],
                     "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}})
CALL = json.dumps({"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}})


def _one(reward, completion, **row):
    (result,) = reward.score(["p"], [completion], **{k: [v] for k, v in row.items()})
    return result.score, result.reason


@pytest.mark.parametrize("completion,letter", [
    ("B", "B"), ("(B)", "B"), ("**B.**", "B"), ("Answer: B", "B"), ("The answer is (B).", "B"),
    ("\\boxed{B}", "B"), ("<think>maybe A, maybe C</think>The answer is B", "B"),
    ("I think the answer is C because 3 > 2.", "C"),
])
def test_mcqa_reads_the_declared_letter(completion, letter):
    assert chosen_letter(completion.split("</think>")[-1]) == (letter, "chosen")
    assert _one(MCQAReward(), completion, answer="B") == ((1.0, "correct") if letter == "B" else (0.0, "wrong_answer"))


def test_mcqa_no_answer_and_unclosed_think():
    assert _one(MCQAReward(), "I am not sure.", answer="B") == (0.0, "no_answer")
    assert _one(MCQAReward(), "<think>Answer: B", answer="B") == (0.0, "unclosed_think")


def test_structured_output_valid_and_fenced():
    ok = '{"name": "Ana", "age": 30}'
    assert _one(StructuredOutputReward(), ok, json_schema=SCHEMA) == (1.0, "valid")
    assert _one(StructuredOutputReward(), f"<think>x</think>```json\n{ok}\n```", json_schema=SCHEMA) == (1.0, "valid")
    assert _one(StructuredOutputReward(), '{"name": "Ana"}', json_schema=SCHEMA) == (0.0, "schema_violation")
    score, reason = _one(StructuredOutputReward(), ok, json_schema="{not json")
    assert (score, reason) == (0.0, "bad_schema")


def test_tool_call_match():
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"unit": "celsius", "city": "Oslo"}}\n</tool_call>'
    assert _one(ToolCallReward(), good, reference_call=CALL) == (1.0, "correct")
    assert _one(ToolCallReward(), "It is sunny.", reference_call=CALL) == (0.0, "no_tool_call")
    wrong = good.replace("Oslo", "Bern")
    assert _one(ToolCallReward(), wrong, reference_call=CALL) == (0.0, "wrong_arguments")


def test_other_domain_rows_are_not_applicable():
    assert _one(MCQAReward(), "B", answer="B", domain="tool_call") == (None, "other_domain")
    assert _one(ToolCallReward(), "B", reference_call=CALL, domain="mcqa") == (None, "other_domain")
    assert _one(StructuredOutputReward(), "{}", json_schema=SCHEMA, domain="mcqa") == (None, "other_domain")
    assert _one(MCQAReward(), "B", answer="B", domain="mcqa") == (1.0, "correct")


def test_strict_json_equality():
    assert same_json({"a": 1}, {"a": 1.0}) and not same_json({"a": 1}, {"a": True})
    assert not same_json({"a": "1"}, {"a": 1}) and not same_json([1, 2], [2, 1])


def test_registered_and_versioned():
    for name in ("mcqa", "structured_output", "tool_call"):
        reward = get_reward(name)
        assert reward.name == name and reward.version
