"""A stage kind and a backend from a module outside the packages (tests/architecture/external_kind.py:
its options model, run config, trainer class and registration lines; nothing edited in spec/, trainer/
or assets/) validate in a recipe, get their prompt set, train through their own trainer on their own
backend with the options the recipe gave, are evaluated on their own eval domain and have a lineage record."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from spec.kinds import stage_kind, unregister_stage_kind
from spec.paths import resolve_home_path
from tests.architecture import external_kind

pytestmark = pytest.mark.slow


@pytest.fixture
def scaled_kind():
    from trainer.stage import ALGORITHMS, BACKENDS

    external_kind.register()
    yield external_kind.SCALED
    unregister_stage_kind(external_kind.SCALED.name)
    BACKENDS.pop("inline", None)
    ALGORITHMS.pop("inline", None)


def _recipe(home: Path, **options) -> dict:
    gen = str(home / "samples")
    return {
        "name": "scaled", "model": {"base": "tiny"},
        "sources": [{"name": "arith", "domain": "math", "path": f"{gen}/arith.jsonl", "generate": "math_rl", "limit": 8}],
        "benchmarks": [{"name": "eval_arith", "path": f"{gen}/eval_arith.jsonl", "generate": "math_eval",
                        "domain": "math", "eval_domain": "scaled_math", "eval_limit": 2}],
        "rl_stages": [{"name": "scaled_rl", "kind": "scaled_math", "sources": ["arith"], "options": options,
                       "train": {"max_steps": 1, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 8,
                                 "backend": "inline"}}],
        "evals": {"max_new_tokens": 8, "modes": ["no_think"]},
    }


def test_bad_options_and_backends_fail_at_load_with_field_paths(scaled_kind, tmp_path) -> None:
    from dagster_project.recipe import parse_recipe
    from spec.recipe import RecipeError

    with pytest.raises(RecipeError) as err:
        parse_recipe(_recipe(tmp_path, reward_scale=-1, colour="red"))
    assert "rl_stages.0.options: reward_scale: Input should be greater than 0" in str(err.value)
    assert "colour: Extra inputs are not permitted" in str(err.value)
    with pytest.raises(RecipeError, match=r"rl_stages.0.options.reference: 'scaled_rl' is not an earlier checkpoint"):
        parse_recipe(_recipe(tmp_path, reference="scaled_rl"))
    data = _recipe(tmp_path)
    data["rl_stages"][0]["train"]["backend"] = "ray"
    with pytest.raises(RecipeError, match=r"rl_stages.0.train.backend: unknown backend 'ray'; registered backends: "
                                          r"deepspeed, inline, torch, trl"):
        parse_recipe(data)


def test_external_kind_materializes_with_its_own_trainer_options_and_backend(scaled_kind, tmp_path, monkeypatch) -> None:
    from assets import build_definitions
    from dagster_project.recipe import parse_recipe
    from spec.recipe import RecipeError

    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    recipe = parse_recipe(_recipe(tmp_path, reward_scale=2.5))
    assert [r.name for r in recipe.rl_stages[0].rewards] == ["math"]  # the kind's default reward
    defs = build_definitions(recipe)
    result = dg.materialize([a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
                            instance=dg.DagsterInstance.ephemeral(), resources=defs.resources)
    assert result.success
    events = {e.asset_key.path[-1]: e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert {"raw_arith", "clean_arith", "scaled_rl_prompts", "scaled_rl", "eval_scaled_rl", "forgetting_matrix"} <= set(events)
    assert events["scaled_rl_prompts"]["rows_out"].value > 0

    assert external_kind.BACKEND_RUNS == [f"{external_kind.__name__}:ScaledTrainer"]  # its backend, its trainer
    folder = Path(str(events["scaled_rl"]["path"].value).replace("${CASCADE_HOME}", str(tmp_path)))
    record = json.loads((folder / "lineage.json").read_text())
    assert record["asset"] == "scaled_rl" and record["data_version"] == events["scaled_rl"]["data_version"].value
    assert record["algorithm"] == "scaled_grpo" and record["backend"] == "inline"
    base = Path(str(events["base_model"]["path"].value).replace("${CASCADE_HOME}", str(tmp_path)))
    assert record["summary"]["reward_scale"] == 2.5  # options -> run config -> trainer
    # options.checkpoints() -> its folder (records store paths relative to the home)
    assert resolve_home_path(record["summary"]["reference"]).resolve() == base.resolve()
    assert [r["name"] for r in record["rewards"]] == ["math"] and "reward/math" in {i["asset"] for i in record["inputs"]}

    report = events["eval_scaled_rl"]["report"].value
    assert set(report) == {"scaled_math"} and report["scaled_math"]["no_think"]["n"] == 2

    unregister_stage_kind(external_kind.SCALED.name)
    with pytest.raises(RecipeError, match="unknown stage kind 'scaled_math'"):
        parse_recipe(_recipe(tmp_path))
    assert stage_kind("math").eval_domain == "math"
