"""A new stage kind added through the registry alone (this module: one StageKind and one
registration line, nothing edited elsewhere) validates in a recipe, gets its prompt set, trains
through its own entry point, is evaluated on its own eval domain and has a lineage record."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from spec.kinds import StageKind, register_stage_kind, stage_kind, unregister_stage_kind

pytestmark = pytest.mark.slow
TRAINED: list[str] = []


def train_toy(config):
    """The toy kind's trainer entry point: GRPO, recorded so the test sees the registry routed here."""
    from trainer.stage import run_grpo

    TRAINED.append(config.output_dir)
    return run_grpo(config)


TOY = StageKind("toy_arith", "rl", source_domains=("math",), trainer=f"{__name__}:train_toy",
                prompt_columns=("answer",), default_rewards=("math",), eval_domain="toy_arith",
                eval_reward="math", description="GRPO on arithmetic, registered from a test module.")


@pytest.fixture
def toy_kind():
    register_stage_kind(TOY)
    yield TOY
    unregister_stage_kind(TOY.name)


def _recipe(home: Path) -> dict:
    gen = str(home / "samples")
    return {
        "name": "toy", "model": {"base": "tiny"},
        "sources": [{"name": "arith", "domain": "math", "path": f"{gen}/arith.jsonl", "generate": "math_rl", "limit": 8}],
        "benchmarks": [{"name": "eval_arith", "path": f"{gen}/eval_arith.jsonl", "generate": "math_eval",
                        "domain": "math", "eval_domain": "toy_arith", "eval_limit": 2}],
        "rl_stages": [{"name": "toy_rl", "kind": "toy_arith", "sources": ["arith"],
                       "train": {"max_steps": 1, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 8}}],
        "evals": {"max_new_tokens": 8, "modes": ["no_think"]},
    }


def test_toy_kind_materializes_through_the_registry(toy_kind, tmp_path, monkeypatch) -> None:
    from assets import build_definitions
    from dagster_project.recipe import RecipeError, parse_recipe

    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    recipe = parse_recipe(_recipe(tmp_path))
    assert [r.name for r in recipe.rl_stages[0].rewards] == ["math"]  # the kind's default reward
    defs = build_definitions(recipe)
    result = dg.materialize([a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    events = {e.asset_key.path[-1]: e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert {"raw_arith", "clean_arith", "toy_rl_prompts", "toy_rl", "eval_toy_rl", "forgetting_matrix"} <= set(events)
    assert events["toy_rl_prompts"]["rows_out"].value > 0

    assert len(TRAINED) == 1 and Path(TRAINED[0]).parent.name == "toy_rl"  # routed to the kind's trainer
    # Trained in `<version>.partial` (assets.publish), published under `<version>` once complete.
    assert TRAINED[0].endswith(".partial") and not Path(TRAINED[0]).exists()
    record = json.loads((Path(TRAINED[0].removesuffix(".partial")) / "lineage.json").read_text())
    assert record["asset"] == "toy_rl" and record["data_version"] == events["toy_rl"]["data_version"].value
    assert record["kind"] == "grpo" and [r["name"] for r in record["rewards"]] == ["math"]
    assert "reward/math" in {i["asset"] for i in record["inputs"]}

    report = events["eval_toy_rl"]["report"].value
    assert set(report) == {"toy_arith"} and report["toy_arith"]["no_think"]["n"] == 2

    unregister_stage_kind(TOY.name)
    with pytest.raises(RecipeError, match="unknown stage kind 'toy_arith'"):
        parse_recipe(_recipe(tmp_path))
    assert stage_kind("math").eval_domain == "math"
