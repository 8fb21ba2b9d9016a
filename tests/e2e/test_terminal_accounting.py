"""Row accounting in the terminal, end to end: `cascade run` on a recipe of its own ends with a
table per source and corpus (rows in, kept, quarantined, decontaminated, deduplicated, top
reasons, layout, reader), `status --json` and `lineage --json` carry the same numbers, and a
source whose every row is quarantined (a ShareGPT file declared `format: openai`) fails its
blocking `rows_kept` check, so the run fails and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dagster_project.cli import main

pytestmark = pytest.mark.slow
FRUITS = ["apple", "banana", "cherry", "damson", "elderberry", "fig", "grape", "huckleberry"]
LEAK = "the quick brown fox jumps over the lazy dog beside the quiet river bank today"


def _openai(user: str, assistant: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


def _sharegpt(user: str, assistant: str) -> dict:
    return {"conversations": [{"from": "human", "value": user}, {"from": "gpt", "value": assistant}]}


def _jsonl(path: Path, rows: list[dict], tail: str = "") -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + tail)
    return path


def _write(data: Path) -> None:
    """mixed.jsonl (format auto): 6 openai rows (one an exact duplicate, one leaking the benchmark),
    3 ShareGPT rows and a broken line; oa.jsonl: 4 good openai rows and one with no assistant turn;
    sharegpt.jsonl: 5 ShareGPT rows (declared `openai` in the failing recipe)."""
    mixed = [_openai(f"Describe the {f} in a few words.", f"The {f} is a tasty fruit number {i}.")
             for i, f in enumerate(FRUITS[:4])]
    mixed += [mixed[0], _openai(f"Please repeat this: {LEAK}.", "I will not.")]
    mixed += [_sharegpt(f"Spell {f} backwards.", f[::-1]) for f in FRUITS[4:7]]
    _jsonl(data / "mixed.jsonl", mixed, "{broken json\n")
    oa = [_openai(f"Name a dish made with {f}.", f"A {f} tart, baked for {i + 20} minutes.") for i, f in enumerate(FRUITS[:4])]
    _jsonl(data / "oa.jsonl", oa + [{"messages": [{"role": "user", "content": "Anyone there?"}]}])
    _jsonl(data / "sharegpt.jsonl", [_sharegpt(f"Is {f} sweet?", f"Yes, {f} is sweet.") for f in FRUITS[:5]])
    _jsonl(data / "bench.jsonl", [{"question": f"Finish the sentence: {LEAK}."}])


def _recipe(tmp_path: Path, name: str, sources: list[dict], sft: bool) -> str:
    recipe: dict = {"name": name, "seed": 7, "model": {"base": "tiny"}, "sources": sources,
                    "benchmarks": [{"name": "leak", "path": "data/bench.jsonl"}],
                    "evals": {"max_new_tokens": 4, "modes": ["no_think"]}}
    if sft:
        recipe["sft_stages"] = [{"name": "sft_acc", "sources": [s["name"] for s in sources], "max_tokens": 1024,
                                 "train": {"epochs": 1, "batch_size": 4, "learning_rate": 5.0e-5, "max_length": 512,
                                           "max_steps": 1}}]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def _table_line(out: str, label: str) -> list[str]:
    """The cells of the table line of `label` (`source mixed`), split on runs of two spaces."""
    line = next(line for line in out.splitlines() if line.startswith(label + " "))
    return [cell.strip() for cell in line[len(label):].split("  ") if cell.strip()]


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / name))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / name / "dagster"))


def test_run_prints_the_accounting_and_status_and_lineage_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data")
    _home(tmp_path, monkeypatch, "home")
    recipe = _recipe(tmp_path, "accounting", [
        {"name": "mixed", "domain": "chat", "path": "data/mixed.jsonl"},
        {"name": "oa", "domain": "chat", "path": "data/oa.jsonl", "format": "openai"}], sft=True)
    assert main(["run", "--recipe", recipe]) == 0
    out = capsys.readouterr().out
    # layout, reader, in, kept, quarantined, decontaminated, deduplicated, filtered, top reasons
    assert _table_line(out, "source mixed") == ["openai+sharegpt", "jsonl", "10", "7", "1", "1", "1", "0",
                                                "contaminated:leak ×1, exact_duplicate ×1, invalid_json ×1"]
    assert _table_line(out, "source oa") == ["openai", "jsonl", "5", "4", "1", "0", "0", "0", "no_assistant_turn ×1"]

    assert main(["status", "--recipe", recipe, "--json"]) == 0
    status = {r["asset"]: r for r in json.loads(capsys.readouterr().out)}
    raw, clean, corpus = status["raw_mixed"]["rows"], status["clean_mixed"]["rows"], status["sft_acc_data"]["rows"]
    assert (raw["format"], raw["reader"], raw["layouts"]) == ("openai", "jsonl", {"openai": 6, "sharegpt": 3})
    assert (raw["rows_in"], raw["kept"], raw["quarantined"], raw["dropped"]) == (10, 9, 1, {"invalid_json": 1})
    assert (clean["rows_in"], clean["kept"], clean["decontaminated"], clean["deduplicated"]) == (9, 7, 1, 1)
    assert status["sft_acc"]["rows"] is None  # a checkpoint has no row accounting
    corpus_cells = _table_line(out, "corpus sft_acc_data")
    assert corpus_cells[2:4] == [str(corpus["rows_in"]), str(corpus["kept"])] and corpus["kept"] > 0

    assert main(["lineage", "sft_acc_data", "--recipe", recipe, "--json"]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["rows"] == corpus
    by_asset = {n["asset"]: n for n in tree["inputs"]}
    assert by_asset["clean_mixed"]["rows"] == clean
    assert next(n for n in by_asset["clean_mixed"]["inputs"] if n["asset"] == "raw_mixed")["rows"] == raw


def test_a_source_whose_rows_are_all_quarantined_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data")
    _home(tmp_path, monkeypatch, "home")
    recipe = _recipe(tmp_path, "wrong_layout", [
        {"name": "oa", "domain": "chat", "path": "data/oa.jsonl", "format": "openai"},
        {"name": "sg_as_openai", "domain": "chat", "path": "data/sharegpt.jsonl", "format": "openai"},
        {"name": "leak_only", "domain": "chat", "path": "data/bench.jsonl", "min_rows": 0}], sft=False)
    assert main(["run", "--recipe", recipe]) == 1
    captured = capsys.readouterr()
    assert ("CHECK FAILED sources/raw_sg_as_openai:rows_kept: sources/raw_sg_as_openai: 0 of 5 rows kept, "
            "fewer than min_rows=1; top reasons: missing_field:messages ×5") in captured.err
    assert "raw_oa:rows_kept" not in captured.err and "leak_only:rows_kept" not in captured.err  # min_rows: 0
    assert _table_line(captured.out, "source sg_as_openai")[2:5] == ["5", "0", "5"]
    assert _table_line(captured.out, "source oa")[2:4] == ["5", "4"]

    assert main(["status", "--recipe", recipe, "--json"]) == 0
    status = {r["asset"]: r for r in json.loads(capsys.readouterr().out)}
    assert status["raw_sg_as_openai"]["rows"]["dropped"] == {"missing_field:messages": 5}
    assert not status["clean_sg_as_openai"]["materialized"]  # the failed check blocked it
    assert status["clean_oa"]["materialized"]
