"""docs/recipe.md's end-to-end guide is executable: every `# file:` block is written out and
used as the guide says (the recipe loads, the sources map with the quarantine reasons the text
names, the team's reward scores and is versioned by its source), so the page cannot rot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from curation.sources import load_source
from dagster_project.recipe import load_recipe
from rewards.registry import get_reward
from spec.hashing import source_version
from spec.paths import REPO_ROOT

GUIDE = (REPO_ROOT / "docs" / "recipe.md").read_text()
FILES = dict(re.findall(r"```\w+\n# file: (\S+)\n(.*?)```", GUIDE, re.S))


@pytest.fixture
def team(tmp_path: Path) -> Path:
    for name, body in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body.removeprefix("# file: "))
    return tmp_path


def test_the_guide_ships_every_file_it_uses() -> None:
    assert {"team_recipe.yaml", "team_rewards.py", "data/support_chats.jsonl", "data/legacy_sharegpt.jsonl",
            "data/support_prefs.jsonl", "data/support_prompts.jsonl"} <= set(FILES)


def test_the_guide_recipe_loads_and_its_sources_map(team: Path) -> None:
    recipe = load_recipe(team / "team_recipe.yaml")
    counts = {}
    for spec in recipe.sources:
        result = load_source(recipe.resolve(spec.path), spec.format, spec.domain, spec.name, reader=spec.reader)
        assert result.rows_in == result.table.num_rows + sum(result.dropped.values())
        counts[spec.name] = (result.format, result.table.num_rows, result.dropped)
    assert counts["support_chats"] == ("openai", 2, {"no_assistant_turn": 1, "bad_role:robot": 1})
    assert counts["legacy_chats"] == ("sharegpt", 1, {"empty_content": 1})  # `auto` detected ShareGPT
    assert counts["support_prefs"][1:] == (1, {})
    first = load_source(team / "data/support_chats.jsonl", "openai", "chat", "c").table.to_pylist()[0]
    assert first["think_response"].startswith("<think>") and first["system"] == "You are Acme's support assistant."
    assert len(json.loads(first["prompt"])) == 3  # both earlier turns kept: both answers are trained on


def test_the_guide_reward_scores_and_is_versioned_by_its_source(team: Path, monkeypatch, capsys) -> None:
    from dagster_project.cli import main

    recipe = load_recipe(team / "team_recipe.yaml")
    spec = recipe.rl_stages[0].rewards[1]
    assert spec.name == f"{team / 'team_rewards.py'}:cites_ticket"  # resolved against the recipe's folder
    reward = get_reward(spec.name, **spec.options)
    assert reward(["q", "q"], ["<think>x</think>See TICKET-1234.", "No ticket TICKET-12."]) == [1.0, 0.0]
    assert reward.version.startswith(source_version(spec.name))

    monkeypatch.chdir(team)
    (team / "in.jsonl").write_text(json.dumps({"completion": "TICKET-9000 opened"}) + "\n")
    assert main(["verify", "team_rewards.py:cites_ticket", "--input", "in.jsonl", "--output", "out.jsonl"]) == 0
    assert json.loads((team / "out.jsonl").read_text())["reward"] == 1.0
    assert source_version("team_rewards.py:cites_ticket") in capsys.readouterr().err


def test_the_guide_variant_extends_the_team_recipe(team: Path) -> None:
    base, variant = load_recipe(team / "team_recipe.yaml"), load_recipe(team / "team_longer.yaml")
    assert variant.name == "team_longer" and variant.rl_stages[0].name == "rlhf"
    assert variant.rl_stages[0].train.max_steps == 20 != base.rl_stages[0].train.max_steps
    assert variant.rl_stages[0].rewards == base.rl_stages[0].rewards  # the team reward kept, resolved alike
    assert variant.sources == base.sources and variant.rl_stages[1:] == base.rl_stages[1:]
