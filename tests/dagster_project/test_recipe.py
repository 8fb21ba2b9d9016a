"""Recipe validation: the shipped recipes load; bad recipes fail naming the field path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dagster_project.recipe import load_recipe, parse_recipe
from spec.paths import REPO_ROOT
from spec.recipe import RecipeError

RECIPES = sorted(p for p in (REPO_ROOT / "recipes").glob("*.yaml") if not p.name.startswith("cascade2"))
# The Cascade 1 recipes; recipes/cascade2*.yaml have their own order and stages (tests/e2e/test_cascade2.py)


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


@pytest.mark.parametrize("field, value, where", [
    ("max_steps", "two", "rl_stages.2.train.max_steps"),
    ("learning_rate", -1e-5, "rl_stages.2.train.learning_rate"),
    ("prompts_per_step", 0, "rl_stages.2.train.prompts_per_step"),
    ("lerning_rate", 1e-5, "rl_stages.2.train.lerning_rate"),
])
def test_train_blocks_are_typed(default_data: dict, field: str, value: object, where: str) -> None:
    data = copy.deepcopy(default_data)
    data["rl_stages"][2]["train"][field] = value
    assert where in _error(data)


def test_every_bad_field_is_reported_at_once(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["sft_stages"][0]["train"]["batch_size"] = 0
    data["reward_model"]["train"]["epochs"] = "one"
    data["rl_stages"][1]["kind"] = "iff"
    data["rl_stages"][3]["rewards"] = [{"name": "code", "options": {"timeout": 3}}]
    msg = _error(data)
    for where in ("sft_stages.0.train.batch_size", "reward_model.train.epochs", "rl_stages.1.kind",
                  "rl_stages.3.rewards.0"):
        assert where in msg, msg
    assert "unknown stage kind 'iff'" in msg and "timeout" in msg


def test_reward_options_are_checked_against_the_reward(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    data["rl_stages"][1]["rewards"] = [{"name": "ifeval", "options": {"mode": "lenient"}}]
    assert "rl_stages.1.rewards.0" in _error(data) and "'strict' or 'loose'" in _error(data)
    data["rl_stages"][1]["rewards"] = [{"name": "ifeval", "options": {"mode": "loose"}}]
    assert parse_recipe(data).rl_stages[1].rewards[0].options == {"mode": "loose"}


def test_rewards_default_to_the_kind(default_data: dict) -> None:
    data = copy.deepcopy(default_data)
    del data["rl_stages"][2]["rewards"]
    assert [r.name for r in parse_recipe(data).rl_stages[2].rewards] == ["math"]


def test_cli_names_the_bad_field_without_traceback(tmp_path: Path, default_data: dict, capsys) -> None:
    from dagster_project.cli import main

    data = copy.deepcopy(default_data)
    data["rl_stages"][0]["train"]["max_steps"] = "two"
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["status", "--recipe", str(path)]) == 2
    err = capsys.readouterr().err
    assert "rl_stages.0.train.max_steps" in err and "Traceback" not in err
    assert main(["status", "--recipe", str(tmp_path / "missing.yaml")]) == 2
    assert "recipe not found" in capsys.readouterr().err
