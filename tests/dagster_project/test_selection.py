"""Selections that work (issue 32): `cascade run --select` takes Dagster's selection syntax
(`+clean_a`: the asset and all its ancestors), a selection whose upstream was never materialized
fails at once naming what to add (nothing runs, nothing is written), and a selected run writes
only the sample files of the sources it reads (dagster_project.selection)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dagster_project.cli import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return tmp_path / "home"


@pytest.fixture
def recipe(tmp_path: Path) -> str:
    """A file source `a`, two built-in sample sources (written when first read) and a benchmark."""
    rows = [{"messages": [{"role": "user", "content": f"Name colour number {i}."},
                          {"role": "assistant", "content": f"Colour number {i} is teal."}]} for i in range(10)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "bench.jsonl").write_text(json.dumps({"question": "Which colour is the sky at noon?"}) + "\n")
    data = {"name": "selections", "seed": 5, "model": {"base": "tiny"},
            "sources": [{"name": "a", "domain": "chat", "path": "a.jsonl"},
                        {"name": "gen_math", "domain": "math", "path": "${CASCADE_HOME}/samples/gen_math.jsonl",
                         "generate": "math_sft", "limit": 20},
                        {"name": "gen_chat", "domain": "chat", "path": "${CASCADE_HOME}/samples/gen_chat.jsonl",
                         "generate": "chat_sft", "limit": 20}],
            "benchmarks": [{"name": "bench", "path": "bench.jsonl"}]}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_plus_selects_the_asset_and_all_its_ancestors(recipe: str, home: Path) -> None:
    from dagster_project.commands import _context, resolve_key
    from dagster_project.selection import observed_files, parse_selection

    _, defs, _ = _context(recipe)
    graph = defs.resolve_asset_graph()

    def select(text: str) -> list[str]:
        return [k.to_user_string() for k in parse_selection(graph, text, lambda n: resolve_key(defs, n))]

    assert select("+clean_a") == ["benchmarks/bench_bench", "curated/clean_a", "sources/raw_a"]
    assert select("raw_a+") == ["curated/clean_a", "sources/raw_a"]
    assert select("raw_a, curated/clean_gen_math") == ["curated/clean_gen_math", "sources/raw_a"]
    assert select('key:"sources/raw_gen_chat" or key:"sources/raw_a"') == ["sources/raw_a", "sources/raw_gen_chat"]
    assert [k.to_user_string() for k in observed_files(graph, parse_selection(graph, "+clean_a", lambda n: resolve_key(defs, n)))] \
        == ["sources/file_a", "sources/file_bench_bench"]
    with pytest.raises(ValueError, match="unknown asset 'clean_z'"):
        select("+clean_z")
    with pytest.raises(ValueError, match="selects no asset"):
        select("group:nothing_here")


def test_a_missing_upstream_fails_at_once_naming_what_to_add(recipe: str, home: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "--recipe", recipe, "--select", "raw_a,clean_a"]) == 2
    err = capsys.readouterr().err
    assert "the selection reads benchmarks/bench_bench, never materialized" in err
    assert "--select raw_a,clean_a,bench_bench" in err and "--select +clean_a" in err
    assert not (home / "data").exists() and not (home / "samples").exists()  # nothing ran or was written
    assert main(["run", "--recipe", recipe, "--select", "+clean_a"]) == 0
    assert main(["run", "--recipe", recipe, "--select", "raw_a,clean_a"]) == 0  # its upstream exists now


def test_a_selected_run_writes_only_the_samples_it_reads(recipe: str, home: Path) -> None:
    assert main(["run", "--recipe", recipe, "--select", "raw_gen_math"]) == 0
    assert sorted(p.name for p in (home / "samples").iterdir()) == ["gen_math.jsonl"]
    assert sorted(p.name for p in (home / "data").iterdir()) == ["raw_gen_math"]
    assert main(["run", "--recipe", recipe, "--select", "+clean_gen_chat"]) == 0
    assert sorted(p.name for p in (home / "samples").iterdir()) == ["gen_chat.jsonl", "gen_math.jsonl"]
    assert sorted(p.name for p in (home / "data").iterdir()) == ["bench_bench", "clean_gen_chat", "raw_gen_chat",
                                                                 "raw_gen_math"]
