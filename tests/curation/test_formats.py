"""Row layouts (openai, sharegpt, preference, llama_nemotron, nemotron_v1) read from jsonl, `.json`,
`datasets` folders and hub-layout parquet folders: canonical output, named quarantine reasons,
detection, row accounting, and SFT rows whose loss covers every assistant turn."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.chat import parse_conversation, prompt_messages, sft_rows
from curation.formats import FORMATS, canonical_record, detect_format, register_format
from curation.schemas import DOMAIN_SCHEMAS, InvalidRow
from curation.rows import row_id
from curation.sources import detect_reader, hub_parquet_files, load_source

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def _accounted(res) -> None:
    assert res.rows_in == res.table.num_rows + sum(res.dropped.values())
    assert res.quarantine.num_rows == sum(res.dropped.values())


def _u(text):
    return {"role": "user", "content": text}


def _a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


OPENAI_GOOD = [
    {"messages": [_u("Hi there"), _a("Hello!")]},
    {"messages": [{"role": "system", "content": "Be terse."}, _u([{"type": "text", "text": "2+2?"}]),
                  _a("<think>add them</think>4")]},
    {"messages": [_u("Capital of France?"), _a("Paris", reasoning_content="It is Paris.")]},
    {"tools": TOOLS, "messages": [
        _u("Weather in Oslo?"),
        _a(None, tool_calls=[{"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]),
        {"role": "tool", "content": '{"temp": 3}'},
        _a("It is 3 degrees in Oslo.")]},
]
OPENAI_BAD = {
    "no_assistant_turn": {"messages": [_u("anyone?")]},
    "bad_role:narrator": {"messages": [{"role": "narrator", "content": "x"}, _a("y")]},
    "unterminated_think": {"messages": [_u("q"), _a("<think>never closed")]},
    "empty_content": {"messages": [_u("q"), _a("   ")]},
    "no_user_turn": {"messages": [{"role": "system", "content": "s"}, _a("hello")]},
    "bad_tool_call": {"messages": [_u("q"), _a("", tool_calls=[{"function": {"name": "f", "arguments": "{not json"}}])]},
    "not_a_list:messages": {"messages": "hello"},
    "missing_field:messages": {"prompt": "a canonical row in an openai file"},
    "ends_with:user": {"messages": [_u("q"), _a("a"), _u("and?")]},
    "misplaced_system_turn": {"messages": [_u("q"), {"role": "system", "content": "late"}, _a("a")]},
}


def test_openai_jsonl_single_and_multi_turn_tools_and_reasoning(tmp_path):
    path = _write_jsonl(tmp_path / "chat.jsonl", OPENAI_GOOD[:3] + list(OPENAI_BAD.values()) + ["{not json"])
    res = load_source(path, "auto", "chat", "oa")
    assert (res.format, res.reader) == ("openai", "jsonl")
    assert res.dropped == {**{reason: 1 for reason in OPENAI_BAD}, "invalid_json": 1}
    assert res.quarantine.column("reason").to_pylist() == [*OPENAI_BAD, "invalid_json"]
    _accounted(res)
    rows = res.table.to_pylist()
    assert [r["prompt"] for r in rows] == ["Hi there", "2+2?", "Capital of France?"]
    assert [r["no_think_response"] for r in rows] == ["Hello!", None, None]
    assert [r["think_response"] for r in rows] == [None, "<think>add them</think>4", "<think>It is Paris.</think>Paris"]
    assert [r["system"] for r in rows] == [None, "Be terse.", None]
    fields = [rows[0][f.name] for f in DOMAIN_SCHEMAS["chat"] if f.name not in ("row_id", "source")]
    assert rows[0]["row_id"] == row_id("oa", fields)  # the same stable id as canonical rows

    tool = load_source(_write_jsonl(tmp_path / "tool.jsonl", [OPENAI_GOOD[3]]), "auto", "tool", "oa_tool")
    row = tool.table.to_pylist()[0]
    assert json.loads(row["tools"]) == [TOOLS[0]["function"]]  # signatures unwrapped
    turns = parse_conversation(row["prompt"])
    assert [t["role"] for t in turns] == ["user", "assistant", "tool"]  # ends with the tool result
    call = turns[1]["content"].removeprefix("<tool_call>").removesuffix("</tool_call>")
    assert json.loads(call) == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert row["no_think_response"] == "It is 3 degrees in Oslo."
    table, dropped = sft_rows(tool.table, "tool")
    assert dropped == {} and table.num_rows == 1
    messages = json.loads(table.column("messages")[0].as_py())
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[1]["content"].endswith(" /no_think") and not messages[3]["content"].endswith("/no_think")
    assert "<tools>" in messages[0]["content"]


def test_system_column_replaces_the_default_system_prompt(tmp_path):
    res = load_source(_write_jsonl(tmp_path / "c.jsonl", OPENAI_GOOD[:2]), "openai", "chat", "s")
    table, _ = sft_rows(res.table, "chat")
    systems = [json.loads(m)[0]["content"] for m in table.column("messages").to_pylist()]
    assert systems[1] == "Be terse." and systems[0] != "Be terse."
    assert prompt_messages("q", "think", system="Be terse.", tools=[TOOLS[0]["function"]])[0]["content"].startswith(
        "Be terse.\n\n# Tools")


def test_json_array_and_gzip_jsonl_files(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(OPENAI_GOOD[:2]))
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in OPENAI_GOOD[:2]))
    for name in ("a.json", "b.jsonl.gz"):
        res = load_source(tmp_path / name, "auto", "chat", "s")
        assert (res.reader, res.format, res.table.num_rows) == ("jsonl", "openai", 2)
    _write_jsonl(tmp_path / "lines.json", OPENAI_GOOD[:2])  # `.json` holding jsonl
    assert load_source(tmp_path / "lines.json", "auto", "chat", "s").table.num_rows == 2


SHAREGPT = [
    {"conversations": [{"from": "system", "value": "You are a pirate."}, {"from": "human", "value": "Hi"},
                       {"from": "gpt", "value": "Arr!"}, {"from": "human", "value": "Bye"}, {"from": "gpt", "value": "Yo ho."}]},
    {"conversations": [{"from": "human", "value": "Q"}, {"from": "narrator", "value": "A"}]},
    {"conversations": [{"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}, {"from": "human", "value": "more"}]},
    {"conversations": [{"from": "gpt", "value": "unprompted"}]},
    {"conversations": None},
]


def test_sharegpt_from_a_datasets_folder(tmp_path):
    import datasets

    datasets.Dataset.from_list(SHAREGPT).save_to_disk(str(tmp_path / "sg"))
    assert detect_reader(tmp_path / "sg") == "hf"
    res = load_source(tmp_path / "sg", "auto", "chat", "sg")
    assert (res.format, res.reader) == ("sharegpt", "hf")
    assert res.dropped == {"bad_role:narrator": 1, "ends_with:user": 1, "no_user_turn": 1, "missing_field:conversations": 1}
    _accounted(res)
    row = res.table.to_pylist()[0]
    assert row["system"] == "You are a pirate." and row["no_think_response"] == "Yo ho."
    assert parse_conversation(row["prompt"]) == [_u("Hi"), _a("Arr!"), _u("Bye")]


def test_sharegpt_function_call_and_observation_turns():
    names = [f.name for f in DOMAIN_SCHEMAS["tool"]]
    record = {"tools": json.dumps([TOOLS[0]["function"]]), "conversations": [
        {"from": "human", "value": "Oslo?"}, {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Oslo"}}'},
        {"from": "observation", "value": "3C"}, {"from": "gpt", "value": "3 degrees."}]}
    out = canonical_record("sharegpt", record, names)
    assert [t["role"] for t in json.loads(out["prompt"])] == ["user", "assistant", "tool"]
    record["conversations"][1]["value"] = "{broken"
    with pytest.raises(InvalidRow, match="bad_tool_call"):
        canonical_record("sharegpt", record, names)


def _nemotron(output, reasoning="on", system="detailed thinking on", **extra):
    return {"input": [_u("What is 6*7?")], "output": output, "reasoning": reasoning, "system_prompt": system,
            "category": "math", "answer": "42", **extra}


LLAMA_NEMOTRON = [
    _nemotron("<think>\n6*7=42\n</think>\n\nThe answer is 42."),
    _nemotron("<think></think>42", reasoning="off", system="detailed thinking off"),
    _nemotron("42", reasoning="off", system="You are a calculator."),
    _nemotron("<think>6*7 is", reasoning="on"),                    # unterminated_think
    _nemotron("<think>hmm</think>42", reasoning="off"),            # think_in_no_think
    _nemotron("42", reasoning="maybe"),                            # bad_reasoning_flag
    _nemotron("42", reasoning="on"),                               # missing_think
    _nemotron("<think>x</think>", reasoning="on"),                 # empty_content
]


def test_llama_nemotron_from_a_hub_parquet_folder(tmp_path):
    folder = tmp_path / "hub"
    (folder / "data").mkdir(parents=True)
    table = pa.Table.from_pylist(LLAMA_NEMOTRON)
    pq.write_table(table, folder / "data" / "train-00000-of-00001.parquet")
    pq.write_table(table.slice(0, 1), folder / "data" / "test-00000-of-00001.parquet")
    assert detect_reader(folder) == "hub_parquet"
    res = load_source(folder, "auto", "math", "ln")
    assert (res.format, res.reader) == ("llama_nemotron", "hub_parquet")
    assert res.dropped == {"unterminated_think": 1, "think_in_no_think": 1, "bad_reasoning_flag": 1,
                           "missing_think": 1, "empty_content": 1}
    _accounted(res)
    rows = res.table.to_pylist()
    assert [r["answer"] for r in rows] == ["42"] * 3  # reference column read by its canonical name
    assert rows[0]["think_response"].startswith("<think>\n6*7=42") and rows[0]["no_think_response"] is None
    assert [r["no_think_response"] for r in rows[1:]] == ["42", "42"]  # empty think prefix stripped
    assert load_source(folder, "auto", "math", "ln", split="test").rows_in == 1
    chat = load_source(folder, "llama_nemotron", "chat", "ln", limit=3).table.column("system").to_pylist()
    assert chat == [None, None, "You are a calculator."]  # mode-control prompts are not system prompts


def test_hub_parquet_split_folders_and_names(tmp_path):
    for rel in ("train/0000.parquet", "test/0000.parquet", "chat-00000-of-00002.parquet", "chat-00001-of-00002.parquet"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"x": [1]}), tmp_path / rel)
    assert [p.relative_to(tmp_path).as_posix() for p in hub_parquet_files(tmp_path)] == ["train/0000.parquet"]
    assert len(hub_parquet_files(tmp_path, "chat")) == 2
    with pytest.raises(ValueError, match="split 'validation'"):
        hub_parquet_files(tmp_path, "validation")


NEMOTRON_V1 = [
    {"category": "chat", "reasoning": "on", "messages": [
        {"role": "system", "content": ""}, _u("Tell me a fact."), _a("<think>Pick one.</think>Honey never spoils.")]},
    {"category": "chat", "reasoning": "off", "messages": [_u("Tell me a fact."), _a("Octopuses have three hearts.")]},
    {"category": "tool_calling", "reasoning": "off", "tools": TOOLS, "messages": [
        _u("Weather in Rome?"), _a("", tool_calls=[{"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}])]},
    {"category": "chat", "reasoning": "on", "messages": [_u("q"), _a("no reasoning here")]},
    {"category": "chat", "reasoning": "off", "messages": [_u("q")]},
]


def test_nemotron_v1_reasoning_flag_and_tool_calls(tmp_path):
    path = _write_jsonl(tmp_path / "v1.jsonl", NEMOTRON_V1)
    res = load_source(path, "auto", "tool", "v1")
    assert res.format == "nemotron_v1"
    # chat rows declare no tools: the tool domain requires them
    assert res.dropped == {"missing_field:tools": 2, "missing_think": 1, "no_assistant_turn": 1}
    _accounted(res)
    row = res.table.to_pylist()[0]
    assert row["no_think_response"] == '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    chat = load_source(path, "nemotron_v1", "chat", "v1")
    assert chat.dropped == {"not_in_domain:tools": 1, "missing_think": 1, "no_assistant_turn": 1}
    assert chat.table.column("think_response").to_pylist()[0] == "<think>Pick one.</think>Honey never spoils."
    assert chat.table.column("system").to_pylist() == [None, None]  # blank system turn dropped


PREFERENCE = [
    {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: A joke?\n\nAssistant: Why did the chicken cross?",
     "rejected": "\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: A joke?\n\nAssistant: No."},
    {"chosen": "\n\nHuman: Name a color.\n\nAssistant: Blue.", "rejected": "\n\nHuman: Name a color.\n\nAssistant: Seven."},
    {"prompt": "Sum 1+1", "chosen": [_u("Sum 1+1"), _a("2")], "rejected": [_u("Sum 1+1"), _a("3")]},
    {"prompt": "Plain", "chosen": "good answer", "rejected": "bad answer"},
    {"chosen": "\n\nHuman: A\n\nAssistant: x", "rejected": "\n\nHuman: B\n\nAssistant: y"},      # prompt_mismatch
    {"prompt": "p", "chosen": [_u("p"), _a("x")], "rejected": "y"},                              # wrong_type:rejected
    {"prompt": "p", "chosen": [_u("p")], "rejected": [_u("p")]},                                 # no_assistant_turn
    {"chosen": "\n\nHuman: A\n\nAssistant: x"},                                                  # missing_field:rejected
    {"chosen": "\n\nHuman: A\n\nAssistant:  ", "rejected": "\n\nHuman: A\n\nAssistant: y"},     # empty_content
]


def test_preference_hh_transcripts_and_message_lists(tmp_path):
    res = load_source(_write_jsonl(tmp_path / "pref.jsonl", PREFERENCE), "auto", "preference", "pref")
    assert res.format == "preference"
    assert res.dropped == {"prompt_mismatch": 1, "wrong_type:rejected": 1, "no_assistant_turn": 1,
                           "missing_field:rejected": 1, "empty_content": 1}
    _accounted(res)
    rows = res.table.to_pylist()
    assert parse_conversation(rows[0]["prompt"]) == [_u("Hi"), _a("Hello!"), _u("A joke?")]
    assert (rows[0]["chosen"], rows[0]["rejected"]) == ("Why did the chicken cross?", "No.")
    assert [(r["prompt"], r["chosen"], r["rejected"]) for r in rows[1:]] == [
        ("Name a color.", "Blue.", "Seven."), ("Sum 1+1", "2", "3"), ("Plain", "good answer", "bad answer")]


def test_detection_explicit_format_and_columns(tmp_path):
    assert detect_format({"messages": [], "reasoning": "on"}) == "nemotron_v1"
    assert detect_format({"input": "x", "output": "y"}) == "llama_nemotron"
    assert detect_format({"input": "x", "output": "y"}, ignore=["input", "output"]) == "canonical"
    assert detect_format({"prompt": "x"}) == "canonical" and detect_format([1]) == "canonical"
    # `columns` targets are canonical columns, not layout keys
    path = _write_jsonl(tmp_path / "m.jsonl", [{"input": "1+1?", "output": "2", "answer": "2"}])
    res = load_source(path, "auto", "math", "m", columns={"prompt": "input", "no_think_response": "output"})
    assert res.format == "canonical" and res.table.column("prompt").to_pylist() == ["1+1?"]
    # an explicit layout is applied to every row; the old reader names mean the canonical layout
    path = _write_jsonl(tmp_path / "c.jsonl", [{"prompt": "p", "no_think_response": "r"}])
    assert load_source(path, "openai", "chat", "c").dropped == {"missing_field:messages": 1}
    legacy = load_source(path, "jsonl", "chat", "c")
    assert (legacy.format, legacy.reader, legacy.table.num_rows) == ("canonical", "jsonl", 1)
    with pytest.raises(ValueError, match="reader"):
        load_source(path, "auto", "chat", "c", reader="csv")
    with pytest.raises(ValueError, match="cannot tell the reader"):
        detect_reader(tmp_path / "x.csv")


def test_register_format_adds_a_layout(tmp_path):
    register_format("qa_pairs", lambda r: {"prompt": r["q"], "no_think_response": r["a"]})
    try:
        path = _write_jsonl(tmp_path / "qa.jsonl", [{"q": "Hi?", "a": "Hello."}])
        assert load_source(path, "qa_pairs", "chat", "qa").table.column("prompt").to_pylist() == ["Hi?"]
    finally:
        del FORMATS["qa_pairs"]


def test_source_spec_format_and_reader_fields(tmp_path):
    from dagster_project.recipe import parse_recipe
    from spec.data import SourceSpec
    from spec.recipe import RecipeError

    legacy = SourceSpec.model_validate({"name": "s", "domain": "chat", "path": "x.parquet", "format": "parquet"})
    assert (legacy.format, legacy.reader) == ("canonical", "parquet")
    fresh = SourceSpec.model_validate({"name": "s", "domain": "chat", "path": "x"})
    assert (fresh.format, fresh.reader) == ("auto", "auto")
    path = str(_write_jsonl(tmp_path / "s.jsonl", OPENAI_GOOD[:1]))

    def recipe(**source):
        return parse_recipe({"name": "r", "model": {"base": "tiny"},
                             "sources": [{"name": "s", "domain": "chat", "path": path, **source}]})

    assert recipe(format="sharegpt", reader="jsonl").sources[0].format == "sharegpt"
    assert recipe(format="jsonl").sources[0].reader == "jsonl"
    with pytest.raises(RecipeError, match="unknown format 'alpaca'"):
        recipe(format="alpaca")
    with pytest.raises(RecipeError, match="unknown reader 'csv'"):
        recipe(reader="csv")


def test_every_assistant_turn_is_in_the_loss_mask(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    from trainer.sft import tokenize_conversation

    conv = {"conversations": [{"from": "human", "value": "Name a fruit."}, {"from": "gpt", "value": "Apple is red."},
                              {"from": "human", "value": "Another one?"}, {"from": "gpt", "value": "Banana is yellow."}]}
    res = load_source(_write_jsonl(tmp_path / "two.jsonl", [conv]), "auto", "chat", "two")
    table, dropped = sft_rows(res.table, "chat")
    assert dropped == {} and table.num_rows == 1
    messages = json.loads(table.column("messages")[0].as_py())
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids, mask = tokenize_conversation(tokenizer, messages, max_length=1024)
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    ignored = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
    assert "Apple is red." in trained and "Banana is yellow." in trained
    assert "Name a fruit." in ignored and "Another one?" in ignored
    assert "Name a fruit." not in trained and "Another one?" not in trained
