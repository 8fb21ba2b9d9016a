"""`extends:` recipes (spec.extends): merge rules, the shipped proof recipe, and the ways an
extending recipe can be wrong (each fails at load with a clear message, never a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dagster_project.recipe import load_recipe
from spec.extends import merge_recipes
from spec.paths import REPO_ROOT
from spec.recipe import RecipeError

RECIPES = REPO_ROOT / "recipes"
BASE = {
    "name": "base",
    "evals": {"modes": ["think", "no_think"], "alpha": 0.05},
    "rl_stages": [
        {"name": "a", "rewards": [{"name": "x"}, {"name": "y"}], "train": {"max_steps": 3, "learning_rate": 1e-5}},
        {"name": "b", "train": {"max_steps": 2}},
    ],
    "benchmarks": [{"name": "h", "builtin": "humaneval"}],
}


def test_mappings_merge_named_entries_merge_in_place_and_inner_lists_replace() -> None:
    child = {"extends": "base.yaml", "name": "child", "evals": {"modes": ["think"]},
             "rl_stages": [{"name": "b", "train": {"max_steps": 9}},
                           {"name": "a", "rewards": [{"name": "z"}], "train": {"learning_rate": 2e-5}},
                           {"name": "c", "train": {"max_steps": 1}}]}
    merged = merge_recipes(BASE, child)
    assert "extends" not in merged and merged["name"] == "child"
    assert merged["evals"] == {"modes": ["think"], "alpha": 0.05}  # the list replaced, alpha kept
    assert [s["name"] for s in merged["rl_stages"]] == ["a", "b", "c"]  # base order, new names appended
    a, b, _ = merged["rl_stages"]
    assert a["rewards"] == [{"name": "z"}]  # exactly the rewards written, not x, y and z
    assert a["train"] == {"max_steps": 3, "learning_rate": 2e-5}
    assert b["train"] == {"max_steps": 9}
    assert BASE["rl_stages"][0]["train"]["learning_rate"] == 1e-5  # the base is not mutated


def test_remove_and_empty_list() -> None:
    merged = merge_recipes(BASE, {"rl_stages": [{"name": "a", "remove": True}], "benchmarks": []})
    assert [s["name"] for s in merged["rl_stages"]] == ["b"] and merged["benchmarks"] == []


def test_proof_recipe_is_the_default_with_only_its_stated_changes() -> None:
    proof, default = load_recipe(RECIPES / "proof.yaml"), load_recipe(RECIPES / "default.yaml")
    written = yaml.safe_load((RECIPES / "proof.yaml").read_text())
    assert written["extends"] == "default.yaml"
    changed = {s["name"] for s in written["rl_stages"]}
    for mine, theirs in zip(proof.rl_stages, default.rl_stages, strict=True):
        assert (mine.model_dump() == theirs.model_dump()) == (mine.name not in changed), mine.name
        assert mine.sources == theirs.sources and mine.kind == theirs.kind
    assert [r.name for r in proof.rl_stages[1].rewards] == ["ifeval_rm"]
    assert proof.rl_stages[2].train.learning_rate == default.rl_stages[2].train.learning_rate  # kept: not written
    assert {b.name: b.eval_limit for b in proof.benchmarks if b.eval_domain} == dict.fromkeys(
        ["eval_math", "eval_ifeval", "eval_code", "eval_swe", "eval_chat"], 128)
    assert proof.sources == default.sources and proof.sft_stages == default.sft_stages
    assert proof.evals == default.evals and proof.reward_model == default.reward_model


def _write(folder: Path, name: str, data: dict) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def _default_copy(folder: Path) -> Path:
    """default.yaml in `folder`, so relative `extends:` and paths resolve there."""
    return _write(folder, "default.yaml", yaml.safe_load((RECIPES / "default.yaml").read_text()))


def test_a_bad_field_of_the_extending_recipe_names_its_merged_path(tmp_path: Path) -> None:
    _default_copy(tmp_path)
    child = _write(tmp_path, "c.yaml", {"extends": "default.yaml",
                                        "rl_stages": [{"name": "math_rl", "train": {"learning_rate": -1}}]})
    with pytest.raises(RecipeError, match=r"rl_stages\.2\.train\.learning_rate"):
        load_recipe(child)


def test_chains_and_overrides_apply_in_order(tmp_path: Path) -> None:
    _default_copy(tmp_path)
    _write(tmp_path, "mid.yaml", {"extends": "default.yaml", "name": "mid",
                                  "rl_stages": [{"name": "swe_rl", "train": {"max_steps": 5}}]})
    sub = tmp_path / "team"
    sub.mkdir()
    leaf = _write(sub, "leaf.yaml", {"extends": "../mid.yaml", "rl_stages": [{"name": "swe_rl", "remove": True}]})
    recipe = load_recipe(leaf, overrides=["rl_stages.code_rl.train.max_steps=7"])
    assert recipe.name == "mid" and [s.name for s in recipe.rl_stages][-1] == "code_rl"
    assert recipe.rl_stages[-1].train.max_steps == 7
    assert load_recipe(tmp_path / "mid.yaml").rl_stages[-1].train.max_steps == 5


@pytest.mark.parametrize("files, message", [
    ({"c.yaml": {"extends": "nope.yaml"}}, r"extends: recipe not found: .*nope\.yaml"),
    ({"c.yaml": {"extends": "b.yaml"}, "b.yaml": {"extends": "c.yaml"}},
     r"extends: cycle: .*c\.yaml -> .*b\.yaml -> .*c\.yaml"),
    ({"c.yaml": {"extends": 5}}, r"extends: expected the path of a recipe file, got 5"),
    ({"c.yaml": {"extends": "b.yaml"}, "b.yaml": ["not", "a", "mapping"]}, r"the top level must be a mapping"),
    ({"c.yaml": {"extends": "default.yaml", "rl_stages": [{"name": "ghost", "remove": True}]}},
     r"rl_stages: cannot remove 'ghost'.*names: rlhf, if_rl"),
], ids=["missing_base", "cycle", "not_a_path", "base_not_a_mapping", "remove_unknown"])
def test_bad_extends_fails_at_load(tmp_path: Path, files: dict, message: str) -> None:
    _default_copy(tmp_path)
    for name, data in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match=message):
        load_recipe(tmp_path / "c.yaml")


def test_cli_exits_2_on_a_missing_base(tmp_path: Path, capsys) -> None:
    from dagster_project.cli import main

    child = _write(tmp_path, "c.yaml", {"extends": "gone.yaml"})
    assert main(["status", "--recipe", str(child)]) == 2
    err = capsys.readouterr().err
    assert "extends: recipe not found" in err and "Traceback" not in err
