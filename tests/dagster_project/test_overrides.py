"""`--set FIELD.PATH=VALUE`: overrides applied before validation, validated like the file."""

from __future__ import annotations

import copy

import pytest
import yaml

from dagster_project.recipe import load_recipe, parse_recipe
from spec.overrides import OverrideError, apply_overrides, overrides_for, parse_override
from spec.paths import REPO_ROOT
from spec.recipe import RecipeError

DEFAULT = yaml.safe_load((REPO_ROOT / "recipes" / "default.yaml").read_text())


def test_values_are_parsed_as_yaml() -> None:
    assert parse_override("seed=7") == (["seed"], 7)
    assert parse_override("evals.modes=[think, no_think]") == (["evals", "modes"], ["think", "no_think"])
    assert parse_override("rl_stages.0.train.learning_rate=1e-5")[1] == 1e-5
    assert parse_override("name='2'") == (["name"], "2")
    for bad in ("seed", "=3", "a..b=1", "a=[unclosed"):
        with pytest.raises(OverrideError):
            parse_override(bad)


def test_lists_are_walked_by_name_or_index_and_recorded_by_name() -> None:
    data, applied = apply_overrides(DEFAULT, ["rl_stages.math_rl.train.max_steps=20",
                                              "rl_stages.3.train.learning_rate=3e-5",
                                              "sources.math_prompts.limit=10"])
    assert data["rl_stages"][2]["train"]["max_steps"] == 20
    assert data["rl_stages"][3]["train"]["learning_rate"] == 3e-5
    assert data["sources"][10]["limit"] == 10
    assert applied == {"rl_stages.math_rl.train.max_steps": 20, "rl_stages.code_rl.train.learning_rate": 3e-5,
                       "sources.math_prompts.limit": 10}
    assert DEFAULT["rl_stages"][2]["train"]["max_steps"] == 6  # the input is not modified


def test_missing_blocks_are_created() -> None:
    data = copy.deepcopy(DEFAULT)
    del data["rl_stages"][0]["train"]
    out, _ = apply_overrides(data, ["rl_stages.rlhf.train.max_steps=1"])
    assert out["rl_stages"][0]["train"] == {"max_steps": 1}


def test_overrides_are_validated_like_the_file() -> None:
    recipe = parse_recipe(DEFAULT, overrides=["rl_stages.math_rl.train.max_steps=20"])
    assert recipe.rl_stages[2].train.max_steps == 20
    assert recipe.overrides == {"rl_stages.math_rl.train.max_steps": 20}
    for bad, where in [("rl_stages.math_rl.train.max_steps=two", "rl_stages.2.train.max_steps"),
                       ("rl_stages.math_rl.train.lerning_rate=1", "rl_stages.2.train.lerning_rate"),
                       ("rl_stages.maths.train.max_steps=2", "no entry 'maths'"),
                       ("seed.value=2", "seed is a value")]:
        with pytest.raises(RecipeError, match=where.replace(".", r"\.")):
            parse_recipe(DEFAULT, overrides=[bad])


def test_each_output_records_the_overrides_that_shape_it() -> None:
    applied = {"seed": 1, "rl_stages.math_rl.train.max_steps": 20, "rl_stages.code_rl.train.max_steps": 2,
               "reward_model.train.max_steps": 3, "sft_stages.sft_stage1.train.max_steps": 4}
    assert overrides_for(applied, "rl_stages", "math_rl") == {"seed": 1, "rl_stages.math_rl.train.max_steps": 20}
    assert overrides_for(applied, "reward_model", "reward_model") == {"seed": 1, "reward_model.train.max_steps": 3}
    assert overrides_for(applied, "sft_stages", "sft_stage1") == {"seed": 1, "sft_stages.sft_stage1.train.max_steps": 4}
    assert overrides_for(applied) == {"seed": 1}


def test_the_recipe_file_is_untouched(tmp_path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(DEFAULT))
    before = path.read_text()
    assert load_recipe(path, overrides=["seed=9"]).seed == 9
    assert path.read_text() == before and load_recipe(path).seed == DEFAULT["seed"]


def test_cli_reports_a_bad_override(capsys) -> None:
    from dagster_project.cli import main

    assert main(["status", "--set", "rl_stages.math_rl.train.max_steps=two"]) == 2
    err = capsys.readouterr().err
    assert "rl_stages.2.train.max_steps" in err and "Traceback" not in err
