"""The asset graph generated from the default recipe: keys, groups and the dependency shape
that makes a dataset swap local (snapshot-style, no materialization)."""

from __future__ import annotations

import sys

import dagster as dg
import pytest

from assets import build_definitions
from dagster_project.recipe import load_recipe
from spec.paths import REPO_ROOT


@pytest.fixture(scope="module")
def graph():
    return build_definitions(load_recipe()).resolve_asset_graph()


def _k(path: str) -> dg.AssetKey:
    return dg.AssetKey(path.split("/"))


def _deps(graph, path: str) -> set[str]:
    return {k.to_user_string() for k in graph.get(_k(path)).parent_keys}


def test_checkpoint_chain_and_names(graph) -> None:
    ckpts = {k.path[-1] for k in graph.get_all_asset_keys() if k.path[0] == "checkpoints"}
    assert ckpts == {"base_model", "sft_stage1", "sft_stage2", "reward_model", "rlhf", "if_rl", "math_rl", "code_rl", "swe_rl"}
    assert _deps(graph, "checkpoints/sft_stage1") == {"checkpoints/base_model", "corpora/sft_stage1_data"}
    assert _deps(graph, "checkpoints/rlhf") == {"checkpoints/sft_stage2", "corpora/rlhf_prompts", "checkpoints/reward_model"}
    # Each RL checkpoint: its parent and its own prompt set only.
    assert _deps(graph, "checkpoints/math_rl") == {"checkpoints/if_rl", "corpora/math_rl_prompts"}
    assert _deps(graph, "checkpoints/swe_rl") == {"checkpoints/code_rl", "corpora/swe_rl_prompts"}


def test_gated_checkpoints_have_an_eval_and_the_matrix_sees_all(graph) -> None:
    # The default recipe evaluates with `scope: gates`: the RL chain's input and every RL checkpoint.
    evals = {k.path[-1] for k in graph.get_all_asset_keys() if k.path[0] == "evals"}
    stages = ["sft_stage2", "rlhf", "if_rl", "math_rl", "code_rl", "swe_rl"]
    assert evals == {f"eval_{s}" for s in stages} | {"forgetting_matrix"}
    assert _deps(graph, "evals/forgetting_matrix") == {f"evals/eval_{s}" for s in stages}


def test_eval_plan_scopes() -> None:
    from assets.evals import eval_plan

    recipe = load_recipe(REPO_ROOT / "recipes" / "default.yaml")
    plan = eval_plan(recipe)
    # Each RL checkpoint: its own and earlier domains plus the next stage's (that stage's `learned` baseline).
    assert plan == {"sft_stage2": ["rm"], "rlhf": ["ifeval", "rm"], "if_rl": ["math", "ifeval", "rm"],
                    "math_rl": ["math", "ifeval", "code", "rm"], "code_rl": ["math", "ifeval", "code", "swe", "rm"],
                    "swe_rl": ["math", "ifeval", "code", "swe", "rm"]}
    recipe.evals.scope = "all"
    full = eval_plan(recipe)
    assert list(full) == ["base_model", "sft_stage1", "sft_stage2", "rlhf", "if_rl", "math_rl", "code_rl", "swe_rl"]
    assert all(len(domains) == 5 for domains in full.values())


def test_math_source_swap_is_local(graph) -> None:
    down = {k.path[-1] for k in dg.AssetSelection.keys(_k("sources/file_math_prompts")).downstream().resolve(graph)}
    for untouched in ("rlhf", "if_rl", "sft_stage1", "sft_stage2", "reward_model", "eval_if_rl", "rlhf_prompts"):
        assert untouched not in down
    assert {"math_rl", "code_rl", "swe_rl", "eval_math_rl", "forgetting_matrix"} <= down


def test_checks_cover_every_corpus_and_rl_checkpoint(graph) -> None:
    checks = {(c.asset_key.path[-1], c.name) for c in graph.asset_check_keys}
    for corpus in ("clean_math_prompts", "sft_stage1_data", "math_rl_prompts", "reward_model_data"):
        assert {(corpus, "no_benchmark_overlap"), (corpus, "row_accounting"), (corpus, "schema")} <= checks
    for stage in ("rlhf", "if_rl", "math_rl", "code_rl", "swe_rl"):
        assert {(stage, "no_forgetting"), (stage, "learned"), (stage, "training_signal")} <= checks
    for stage in ("sft_stage1", "sft_stage2"):
        assert (stage, "training_signal") in checks and (stage, "learned") not in checks


def test_no_forgetting_reads_every_earlier_checkpoint() -> None:
    """The gate compares with the best earlier checkpoint, so it reads every earlier eval (that the scope makes)."""
    defs = build_definitions(load_recipe())
    spec = next(s for c in defs.asset_checks or [] for s in c.check_specs
                if s.asset_key.path[-1] == "code_rl" and s.name == "no_forgetting")
    deps = {d.asset_key.to_user_string() for d in spec.additional_deps}
    earlier = {f"evals/eval_{s}" for s in ("sft_stage2", "rlhf", "if_rl", "math_rl")}
    assert earlier <= deps and "evals/eval_code_rl" not in deps and "evals/eval_base_model" not in deps


def test_code_location_loads_without_heavy_imports() -> None:
    code = ("import sys, dagster_project.definitions as d; d.defs.resolve_asset_graph();"
            "heavy=[m for m in ('torch','transformers','sentence_transformers','deepspeed','polars') if m in sys.modules];"
            "print(heavy); assert not heavy")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
