"""ChatML rendering, mode suffixes, think-block checks, tools and SFT row building."""

from __future__ import annotations

import json

import jinja2.sandbox
import pyarrow as pa
import pytest

from curation.chat import (
    CHAT_TEMPLATE,
    extract_final_answer,
    parse_conversation,
    prompt_messages,
    render_messages,
    render_prompt,
    sft_rows,
    strip_think_history,
)
from curation.schemas import SFT_SCHEMA
from spec.train import DEFAULT_SYSTEM

TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def _row(i, prompt="What is 2 + 3?", think="<think>2 plus 3 is 5.</think>The answer is 5.", no_think="5", **extra):
    return {"row_id": f"r{i}", "source": "s", "prompt": prompt, "think_response": think, "no_think_response": no_think, **extra}


def test_render_exact_chatml():
    msgs = prompt_messages("Hi", "no_think") + [{"role": "assistant", "content": "Hello!"}]
    assert render_messages(msgs) == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nHi /no_think<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n"
    )
    assert render_prompt("Hi", "no_think").endswith("Hi /no_think<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render_prompt("Hi", "think").endswith("<|im_start|>user\nHi /think<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("mode", ["think", "no_think"])
@pytest.mark.parametrize("gen", [False, True])
def test_jinja_template_matches_renderer(gen, mode):
    # transformers renders chat templates in a sandboxed env with these flags
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    msgs = prompt_messages(json.dumps([{"role": "user", "content": "a\n\nb"},
                                       {"role": "assistant", "content": "<think>t</think>x"},
                                       {"role": "user", "content": "c"}]), mode, tools=TOOLS)
    for conv in (msgs, msgs + [{"role": "assistant", "content": "done"}], []):
        assert env.from_string(CHAT_TEMPLATE).render(messages=conv, add_generation_prompt=gen) == render_messages(conv, gen)


def test_mode_suffix_on_every_user_turn_and_history_stripped():
    conv = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "<think>hmm</think>one"},
            {"role": "user", "content": "second /think"}]
    msgs = prompt_messages(json.dumps(conv), "no_think")
    assert [m["content"] for m in msgs[1:]] == ["first /no_think", "one", "second /no_think"]
    assert strip_think_history(conv)[1]["content"] == "one"


def test_tools_declared_in_system_prompt_one_per_line():
    system = prompt_messages("weather?", "no_think", tools=TOOLS)[0]["content"]
    block = system.split("<tools>\n")[1].split("\n</tools>")[0]
    assert [json.loads(line) for line in block.splitlines()] == TOOLS
    assert system.startswith(DEFAULT_SYSTEM)


def test_parallel_responses_become_two_rows():
    table, dropped = sft_rows([_row(1)], "chat")
    assert table.schema == SFT_SCHEMA and dropped == {}
    assert table.column("mode").to_pylist() == ["think", "no_think"]
    think_msgs, plain_msgs = (json.loads(m) for m in table.column("messages").to_pylist())
    assert think_msgs[1]["content"].endswith(" /think") and plain_msgs[1]["content"].endswith(" /no_think")
    # The /no_think answer itself holds no think block; its turn starts with the empty one.
    assert "<think>" not in plain_msgs[-1]["content"]
    assert table.column("text")[1].as_py().endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n5<|im_end|>\n")
    assert table.column("text")[0].as_py() == render_messages(think_msgs)


def test_malformed_think_blocks_are_dropped_with_reasons():
    rows = [
        _row(1, think="no block here", no_think="<think>x</think>5"),
        _row(2, think="<think>a</think><think>b</think>5", no_think=None),
        _row(3, think="<think>only reasoning</think>  ", no_think=""),
        _row(4, think=None, no_think=None),
    ]
    table, dropped = sft_rows(pa.Table.from_pylist(rows), "math")
    assert table.num_rows == 0
    assert dropped == {"bad_think_block": 2, "think_in_no_think": 1, "empty_answer": 1, "no_response": 1}


def test_ground_truth_disagreement_dropped():
    rows = [
        _row(1, prompt="Which is a noble gas? (A) N (B) Ne", think="<think>Neon.</think>The answer is (B).",
             no_think="Answer: A", answer="B"),
        _row(2, prompt="g on Earth in m/s^2?", think="<think>about 9.8</think>\\boxed{9.80}", no_think="It varies.", answer="9.8"),
    ]
    table, dropped = sft_rows(rows, "science")
    assert table.column("row_id").to_pylist() == ["r1-think", "r2-think"]
    assert dropped == {"disagrees_with_ground_truth": 1, "no_final_answer": 1}
    chat, chat_dropped = sft_rows([_row(3, no_think="The answer is 6", ground_truth="5")], "chat")
    assert chat.num_rows == 1 and chat_dropped == {"disagrees_with_ground_truth": 1}


def test_tool_calls_validated_against_declared_tools():
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    rows = [
        _row(1, prompt="Weather in Oslo?", think=f"<think>Use the tool.</think>{good}", no_think=good, tools=json.dumps(TOOLS)),
        _row(2, prompt="Weather in Rome?", think=None, no_think='<tool_call>{"name": "search", "arguments": {}}</tool_call>',
             tools=json.dumps(TOOLS)),
        _row(3, prompt="Weather in Bern?", think=None, no_think="<tool_call>{not json}</tool_call>", tools=json.dumps(TOOLS)),
    ]
    table, dropped = sft_rows(rows, "tool")
    assert table.num_rows == 2 and dropped == {"bad_tool_call": 2}
    assert "<tools>" in json.loads(table.column("messages")[0].as_py())[0]["content"]


def test_extract_final_answer_nested_boxed():
    assert extract_final_answer("<think>\\boxed{1}</think>so \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert extract_final_answer("I cannot tell.") is None


def test_doctests_of_chat_and_patches():
    import doctest

    import curation.chat
    import curation.patches

    for module in (curation.chat, curation.patches):
        assert doctest.testmod(module).failed == 0


def test_conversation_may_end_with_a_tool_turn_and_only_user_turns_get_the_suffix():
    conv = [{"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'},
            {"role": "tool", "content": "3C"}]
    assert parse_conversation(json.dumps(conv)) == conv
    assert parse_conversation(json.dumps(conv[:2])) is None  # ending with an assistant turn: not a prompt
    msgs = prompt_messages(json.dumps(conv), "think")
    assert [m["content"] for m in msgs[1:]] == ["Weather in Oslo? /think", conv[1]["content"], "3C"]


def test_row_system_prompt_replaces_the_default():
    table, _ = sft_rows([_row(1, system="You are a pirate.", tools=json.dumps(TOOLS))], "tool")
    system = json.loads(table.column("messages")[0].as_py())[0]["content"]
    assert system.startswith("You are a pirate.\n\n# Tools") and DEFAULT_SYSTEM not in system
    table, _ = sft_rows([_row(2, system=None)], "chat")
    assert json.loads(table.column("messages")[0].as_py())[0]["content"] == DEFAULT_SYSTEM
