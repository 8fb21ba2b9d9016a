"""Real chat layouts in, an SFT checkpoint out: a recipe whose sources are openai, sharegpt,
llama_nemotron, nemotron_v1 and preference files (jsonl, a `datasets` folder, a hub-layout
parquet folder), malformed rows included, materialized through Dagster."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dagster_project.cli import main
from spec.paths import resolve_home_path

pytestmark = pytest.mark.slow
FRUITS = ["apple", "banana", "cherry", "damson", "elderberry", "fig", "grape", "huckleberry"]


def _u(text: str) -> dict:
    return {"role": "user", "content": text}


def _a(text: str | None, **extra) -> dict:
    return {"role": "assistant", "content": text, **extra}


def _write_sources(root: Path) -> dict[str, dict[str, int]]:
    """Write one source per layout; return the quarantine counts each raw asset must report."""
    openai = [{"messages": [_u(f"Describe the {f} in a few words."), _a(f"The {f} is a tasty fruit number {i}.")]}
              for i, f in enumerate(FRUITS)]
    openai += [{"messages": [_u("Is anyone there?")]}, {"messages": [_u("Hm"), _a("<think>never closed")]}]
    (root / "openai.jsonl").write_text("\n".join(json.dumps(r) for r in openai) + "\n{broken json\n")

    import datasets

    sharegpt = [{"conversations": [{"from": "human", "value": f"Spell {f} backwards."},
                                   {"from": "gpt", "value": f[::-1]},
                                   {"from": "human", "value": f"And how many letters does {f} have?"},
                                   {"from": "gpt", "value": f"{f.capitalize()} has {len(f)} letters."}]} for f in FRUITS]
    sharegpt.append({"conversations": [{"from": "human", "value": "Hi"}, {"from": "wizard", "value": "Poof"}]})
    datasets.Dataset.from_list(sharegpt).save_to_disk(str(root / "sharegpt"))

    nemotron = [{"input": [_u(f"What colour is a ripe {f}?")], "output": f"<think>Recall the {f}.</think>A ripe {f} has its colour {i}.",
                 "reasoning": "on", "system_prompt": "detailed thinking on"} for i, f in enumerate(FRUITS)]
    nemotron += [{"input": [_u("Count to three.")], "output": "<think>one two", "reasoning": "on", "system_prompt": ""},
                 {"input": [_u("Say hi.")], "output": "hi", "reasoning": "sometimes", "system_prompt": ""}]
    (root / "hub" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(nemotron), root / "hub" / "data" / "train-00000-of-00001.parquet")

    tools = [{"type": "function", "function": {"name": "price_of", "parameters": {
        "type": "object", "properties": {"fruit": {"type": "string"}}}}}]
    v1 = [{"category": "tool_calling", "reasoning": "off", "tools": tools, "messages": [
        _u(f"How much does a kilo of {f} cost?"),
        _a(None, tool_calls=[{"type": "function", "function": {"name": "price_of", "arguments": json.dumps({"fruit": f})}}]),
        {"role": "tool", "content": json.dumps({"price": i + 1})},
        _a(f"A kilo of {f} costs {i + 1} euros.")]} for i, f in enumerate(FRUITS)]
    v1.append({"category": "tool_calling", "reasoning": "off", "tools": tools, "messages": [
        _u("Price of kiwi?"), _a("", tool_calls=[{"function": {"name": "price_of", "arguments": "{oops"}}])]})
    (root / "v1.jsonl").write_text("\n".join(json.dumps(r) for r in v1) + "\n")

    pref = [{"chosen": f"\n\nHuman: Is {f} a fruit?\n\nAssistant: Yes, {f} is a fruit.",
             "rejected": f"\n\nHuman: Is {f} a fruit?\n\nAssistant: No."} for f in FRUITS]
    pref.append({"chosen": "\n\nHuman: A\n\nAssistant: x", "rejected": "\n\nHuman: B\n\nAssistant: y"})
    (root / "pref.jsonl").write_text("\n".join(json.dumps(r) for r in pref) + "\n")
    return {
        "oa_chat": {"no_assistant_turn": 1, "unterminated_think": 1, "invalid_json": 1},
        "sg_chat": {"bad_role:wizard": 1},
        "ln_chat": {"unterminated_think": 1, "bad_reasoning_flag": 1},
        "v1_tool": {"bad_tool_call": 1},
        "pref": {"prompt_mismatch": 1},
    }


LAYOUTS = {"oa_chat": ("openai", "jsonl"), "sg_chat": ("sharegpt", "hf"), "ln_chat": ("llama_nemotron", "hub_parquet"),
           "v1_tool": ("nemotron_v1", "jsonl"), "pref": ("preference", "jsonl")}


def test_own_formats_reach_an_sft_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    data = tmp_path / "data"
    data.mkdir()
    expected = _write_sources(data)
    recipe = {
        "name": "own_formats", "seed": 7, "model": {"base": "tiny"},
        "sources": [
            {"name": "oa_chat", "domain": "chat", "path": "data/openai.jsonl"},
            {"name": "sg_chat", "domain": "chat", "path": "data/sharegpt", "format": "sharegpt"},
            {"name": "ln_chat", "domain": "chat", "path": "data/hub"},
            {"name": "v1_tool", "domain": "tool", "path": "data/v1.jsonl", "format": "nemotron_v1", "reader": "jsonl"},
            {"name": "pref", "domain": "preference", "path": "data/pref.jsonl"},
        ],
        "sft_stages": [{"name": "sft_own", "sources": ["oa_chat", "sg_chat", "ln_chat", "v1_tool"], "max_tokens": 1024,
                        "train": {"epochs": 1, "batch_size": 4, "learning_rate": 5.0e-5, "max_length": 512, "max_steps": 1}}],
        "evals": {"max_new_tokens": 4, "modes": ["no_think"]},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert main(["run", "--recipe", str(path)]) == 0

    capsys.readouterr()
    assert main(["lineage", "sft_own", "--recipe", str(path), "--json"]) == 0
    ckpt = Path(json.loads(capsys.readouterr().out)["path"])
    assert (ckpt / "model.safetensors").exists()

    import dagster as dg

    from dagster_project.commands import get_instance

    instance = get_instance()
    for name, dropped in expected.items():
        event = instance.get_latest_materialization_event(dg.AssetKey(["sources", f"raw_{name}"]))
        meta = {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()}
        assert meta["dropped"] == dropped, name
        assert meta["rows_in"] == meta["rows_out"] + sum(dropped.values()) == 8 + sum(dropped.values()), name
        assert (meta["format"], meta["reader"]) == LAYOUTS[name]
        assert next(iter(dropped)) in meta["quarantine_examples"]

    corpus = instance.get_latest_materialization_event(dg.AssetKey(["corpora", "sft_own_data"]))
    folder = resolve_home_path(corpus.asset_materialization.metadata["path"].value)  # stored as ${CASCADE_HOME}/...
    sft = pq.read_table(folder / "data.parquet").to_pylist()
    assert {r["source"] for r in sft} == {"oa_chat", "sg_chat", "ln_chat", "v1_tool"}
    multi = next(json.loads(r["messages"]) for r in sft if r["source"] == "sg_chat")
    assert [m["role"] for m in multi] == ["system", "user", "assistant", "user", "assistant"]
