"""Red team: what a reward-hacking policy tries against the multi-domain verifiers scores 0."""

from __future__ import annotations

import json

import pytest

from rewards.multi_domain import MCQAReward, StructuredOutputReward, ToolCallReward

SCHEMA = json.dumps({"type": "object", "additionalProperties": False, "required": ["name", "age", "member"],
                     "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                    "member": {"type": "boolean"}}})
CALL = json.dumps({"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}})


def _score(reward, completion, **row):
    (result,) = reward.score(["p"], [completion], **{k: [v] for k, v in row.items()})
    return result.score


@pytest.mark.parametrize("attack", [
    "<think>The answer is B</think>I don't know.",  # the right letter only inside the think block
    "<think>Answer: B</think>",  # nothing after </think>
    "<think>Answer: B",  # an unclosed think block
    "A B C D",  # every letter
    "Answer: A, B, C or D",  # a list of letters
    "Answer: B or C",  # hedging between two
    "Answer: B\nAnswer: A",  # two declarations, the last one (the answer) wrong
    "The answer is (B). Actually the answer is (A).",  # a correction away from the right letter
    "Answer: A\nAnswer: B\nAnswer: C\nAnswer: D",  # every letter declared in turn: the last is D
    "\\boxed{B} \\boxed{C}",  # two boxes
    "B) or C)",  # bare letters, more than one
    "It's B, C or D.",  # prose without a declaration
])
def test_mcqa_attacks(attack):
    assert _score(MCQAReward(), attack, answer="B") == 0.0


@pytest.mark.parametrize("attack", [
    'Sure! Here it is: {"name": "Ana", "age": 30, "member": true}',  # JSON inside prose
    '{"name": "Ana", "age": 30, "member": true} Hope this helps!',  # trailing prose
    '{"name": "Ana", "age": 30, "member": true, "note": "x"}',  # an extra key
    '{"name": "Ana", "age": "30", "member": true}',  # a wrong type (string for integer)
    '{"name": "Ana", "age": 30.5, "member": true}',  # a wrong type (float)
    '{"name": "Ana", "age": 30, "member": "yes"}',  # a wrong type (string for boolean)
    '{"name": "Ana", "age": 30}',  # a missing required key
    '{"name": "Ana", "age": 30, "member": true, "name": 1}',  # duplicate keys
    '{"name": "Ana", "age": NaN, "member": true}',  # not JSON
    '<think>{"name": "Ana", "age": 30, "member": true}</think>no',  # the JSON only in the think block
    '[{"name": "Ana", "age": 30, "member": true}]',  # wrapped in an array
    '"{\\"name\\": \\"Ana\\", \\"age\\": 30, \\"member\\": true}"',  # JSON as a string
    '```json\n{"name": "Ana", "age": 30, "member": true}\n```\n```json\n{}\n```',  # two fences
])
def test_structured_output_attacks(attack):
    assert _score(StructuredOutputReward(), attack, json_schema=SCHEMA) == 0.0


@pytest.mark.parametrize("attack", [
    '<tool_call>{"name": "set_timer", "arguments": "{\\"minutes\\": 5, \\"label\\": \\"tea\\"}"}</tool_call>',  # args as a string
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": "5", "label": "tea"}}</tool_call>',  # wrong type
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5}}</tool_call>',  # a missing argument
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea", "x": 1}}</tool_call>',  # extra arg
    '<tool_call>{"name": "get_weather", "arguments": {"minutes": 5, "label": "tea"}}</tool_call>',  # wrong name
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}}</tool_call>'
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": 6, "label": "tea"}}</tool_call>',  # several calls
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}, "name": "x"}</tool_call>',  # dup key
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}, "id": 1}</tool_call>',  # extra key
    '<think><tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}}</tool_call></think>ok',
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}}',  # unclosed block
    'set_timer(minutes=5, label="tea")',  # not a tool call block
    '<tool_call>{"name": "set_timer", "arguments": {"minutes": true, "label": "tea"}}</tool_call>',  # bool for int
])
def test_tool_call_attacks(attack):
    assert _score(ToolCallReward(), attack, reference_call=CALL) == 0.0


def test_honest_answers_still_score():
    assert _score(MCQAReward(), "<think>5+3=8, option B</think>The answer is B.", answer="B") == 1.0
    # the last declaration is the answer (as the math reward's last box): a self-correction is paid
    assert _score(MCQAReward(), "The answer is (A). Actually the answer is (B).", answer="B") == 1.0
    assert _score(StructuredOutputReward(), '{"name": "Ana", "age": 30, "member": true}', json_schema=SCHEMA) == 1.0
    honest = '<tool_call>{"name": "set_timer", "arguments": {"minutes": 5, "label": "tea"}}</tool_call>'
    assert _score(ToolCallReward(), honest, reference_call=CALL) == 1.0
