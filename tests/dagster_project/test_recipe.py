"""Recipe validation: the shipped recipes load; bad recipes fail naming the field path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dagster_project.recipe import REPO_ROOT, RecipeError, load_recipe, parse_recipe

RECIPES = sorted((REPO_ROOT / "recipes").glob("*.yaml"))


@pytest.fixture(scope="module")
def default_data() -> dict:
    return yaml.safe_load((REPO_ROOT / "recipes" / "default.yaml").read_text())


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_shipped_recipes_validate(path: Path) -> None:
    recipe = load_recipe(path)
    assert [s.name for s in recipe.rl_stages] == ["rlhf", "if_rl", "math_rl", "code_rl", "swe_rl"]
    assert [s.name for s in recipe.sft_stages] == ["sft_stage1", "sft_stage2"]
    assert recipe.reward_model and recipe.reward_model.name == "reward_model"


def _error(data: dict) -> str:
    with pytest.raises(RecipeError) as info:
        parse_recipe(data)
    return str(info.value)


def test_wrong_type_names_the_field(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["curation"]["decontam"]["ngram"] = "nine"
    assert "curation.decontam.ngram" in _error(data)


def test_unknown_reward_names_the_field(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["rl_stages"][2]["rewards"][0]["name"] = "maths"
    msg = _error(data)
    assert "rl_stages.2.rewards.0.name" in msg and "maths" in msg


def test_unknown_source_reference(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["sft_stages"][0]["sources"].append("nope")
    assert "sft_stages.0.sources.7: unknown source 'nope'" in _error(data)


def test_source_domain_must_fit_stage_kind(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["rl_stages"][2]["sources"] = ["code_prompts"]
    assert "rl_stages.2.sources.0" in _error(data)


def test_unknown_field_is_rejected(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["rl_stages"][0]["learning_rate"] = 1.0
    assert "rl_stages.0.learning_rate" in _error(data)


def test_duplicate_names_and_bad_names(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["sources"].append(dict(data["sources"][0]))
    assert "used twice" in _error(data)
    data = copy.deepcopy(default_data)
    data["rl_stages"][0]["name"] = "Bad Name"
    assert "rl_stages.0.name" in _error(data)


def test_rm_reward_needs_reward_model(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    del data["reward_model"]
    assert "reward_model" in _error(data)


def test_benchmark_needs_exactly_one_origin(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["benchmarks"][0]["path"] = "x.jsonl"
    assert "benchmarks.0" in _error(data)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(bad)


def test_cli_reports_bad_recipe(tmp_path: Path, default_data: dict) -> None:
    from dagster_project.cli import main

    data = copy.deepcopy(default_data)
    data["rl_stages"][1]["train"] = "fast"
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["status", "--recipe", str(path)]) == 2
