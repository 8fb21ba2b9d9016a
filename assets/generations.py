"""Generation assets: a model's responses to a source's rows, made and filtered in the platform.

One asset per `generations:` entry of the recipe (spec.generation). It prompts the curated
(decontaminated, deduplicated) rows of its input source through the generation engine and the
generation cache (generation.runner), then filters: rejection sampling into SFT rows, pass-rate
filtering of RL prompts, or SWE patch sampling (generation.filters). Stages list it in their
`sources:` like a source.

The teacher may be a checkpoint asset of the same recipe: the asset then depends on it, so a
retrained teacher makes exactly this generation and what is built from it stale; a built-in
model or folder is versioned by its content. The code version covers the generation library,
the entry's settings and the verifier's source version (editing the verifier re-filters, from
the cache, with no new generation). The data version is the content hash of the output table.

An entry with `shards: N` (N > 1) is a graph-backed asset with the same key: N shard steps, each
generating its share of the rows (generation.shards: crc32 of the row_id) into a versioned shard
dataset, and a merge step that reassembles the records in input order and filters them as the
unsharded asset does (same output and data version whenever the samples are the same; the
spec field's docstring says when). Both paths call the same functions below (`_read_inputs`,
`_records`, `_filter_and_write`, `_metadata`); the shard and merge steps only add the split.

`CASCADE_TEST_KILL_AT=generation_batch:<name>` (or `:<name>_shard_<k>`) makes the generating
process SIGKILL itself once its first batch is generated and committed to the generation
cache (assets.publish.kill_point; tests only): a rerun must then generate only the rest.
"""


import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import dagster as dg

from assets.common import CHECKPOINTS, CURATED, WorkTimer, dataset_metadata, key
from assets.publish import kill_point
from assets.store import CascadeStore
from spec.generation import GenerationSpec
from spec.hashing import code_version
from spec.lineage import input_ref
from spec.recipe import Recipe

GENERATIONS = "generations"
GENERATION_CODE = ("generation", "curation")


def teacher_stage(recipe: Recipe, gen: GenerationSpec) -> str | None:
    """The checkpoint stage a generation samples from, or None for a built-in model / folder.

    A pass-rate generation without a model uses the input checkpoint of the first RL stage
    that takes it (the policy the stage would start from)."""
    chain = ["base_model", *[s.name for s in recipe.sft_stages], *[s.name for s in recipe.rl_stages]]
    if gen.model is None:
        user = next(s.name for s in recipe.rl_stages if gen.name in s.sources)
        return chain[chain.index(user) - 1]
    return gen.model if gen.model in chain else None


def generation_key(name: str) -> dg.AssetKey:
    return key(GENERATIONS, name)


def source_table_key(recipe: Recipe, name: str) -> dg.AssetKey:
    """The asset a stage reads for one of its `sources:`: a generation's output or a curated source."""
    return generation_key(name) if recipe.generation(name) else key(CURATED, f"clean_{name}")


def _filter(gen: GenerationSpec, domain: str, records: Any, verifier: Any, schema: Any, stats: Any) -> Any:
    from generation.filters import PassRateBand, pass_rate_filter, rejection_sample, swe_patch_sample

    if gen.use == "rejection":
        return rejection_sample(records, domain, verifier, gen.max_per_prompt, source=gen.name, stats=stats)
    if gen.use == "pass_rate":
        band = PassRateBand(gen.min_pass_rate, gen.max_pass_rate, gen.drop_unsolved, gen.drop_solved)
        return pass_rate_filter(records, verifier, band, schema=schema, stats=stats)
    return swe_patch_sample(records, stats=stats)


@dataclass(frozen=True)
class _Plan:
    """What a generation asset knows when the definitions load."""

    recipe: Recipe
    gen: GenerationSpec
    input_key: dg.AssetKey
    teacher: str | None
    teacher_key: dg.AssetKey | None
    domain: str
    config: dict[str, Any]
    code: str

    @property
    def deps(self) -> list[dg.AssetKey]:
        return [k for k in (self.input_key, self.teacher_key) if k]

    @property
    def model_text(self) -> str:
        return f"checkpoint {self.teacher!r}" if self.teacher else repr(self.gen.model)

    @property
    def description(self) -> str:
        gen = self.gen
        return (f"{gen.use} of {gen.input!r}: {gen.samples} sample(s) per prompt and mode ({', '.join(gen.modes)}) "
                f"from {self.model_text} on the {gen.engine.name} engine"
                + (f", verified by {gen.verify.name!r} (>= {gen.threshold:g})." if gen.verify else "."))


def _plan(recipe: Recipe, gen: GenerationSpec) -> _Plan:
    from rewards.registry import reward_code_versions

    teacher = teacher_stage(recipe, gen)
    config = {"generation": gen.model_dump(mode="json", exclude={"shards"}), "teacher": teacher,
              "verifier": reward_code_versions([gen.verify]) if gen.verify else {}}
    # Neither the shard count nor the endpoints serving the model change what is generated:
    # resharding or adding a replica leaves the asset up to date (the lineage still records them).
    versioned = {**config, "generation": gen.model_dump(
        mode="json", exclude={"shards": True, "engine": {"base_url": True, "base_urls": True}})}
    return _Plan(recipe, gen, key(CURATED, f"clean_{gen.input}"), teacher, key(CHECKPOINTS, teacher) if teacher else None,
                 recipe.source(gen.input).domain, config, code_version(GENERATION_CODE, versioned))


@dataclass
class _Inputs:
    """The rows to prompt and the model, as read by one step."""

    rows: Any
    input_ref: dict[str, Any]
    model_path: str
    model_version: str
    teacher_ref: dict[str, Any]


def _input_rows(path: str | Path, gen: GenerationSpec) -> Any:
    import pyarrow.parquet as pq

    rows = pq.read_table(Path(path) / "data.parquet")
    return rows.slice(0, gen.limit) if gen.limit else rows


def _read_inputs(context: dg.OpExecutionContext, plan: _Plan, store: CascadeStore) -> _Inputs:
    from generation.runner import served_version
    from trainer.models import model_folder

    gen = plan.gen
    source = store.upstream_ref(context, plan.input_key)
    if plan.teacher_key is not None:
        teacher_ref = store.upstream_ref(context, plan.teacher_key)
        model_path, model_version = teacher_ref["path"], teacher_ref["data_version"]
    elif gen.engine.name == "openai":
        model_path, model_version = str(gen.model), served_version(str(gen.model))
        teacher_ref = input_ref(f"model/{gen.model}", model_version, ",".join(gen.engine.urls))
    else:
        # a relative folder resolves against the recipe's folder, as every path of a recipe
        folder, model_version = model_folder(str(gen.model), home=store.root(), relative_to=plan.recipe.resolve("."))
        model_path, teacher_ref = str(folder), input_ref(f"model/{gen.model}", model_version, folder)
    return _Inputs(_input_rows(source["path"], gen), source, model_path, model_version, teacher_ref)


@contextmanager
def _records(context: dg.OpExecutionContext, plan: _Plan, store: CascadeStore, inputs: _Inputs, rows: Any,
             stats: Any, label: str) -> Iterator[Iterator[Any]]:
    """The record stream of `rows` (generation.runner), the cache (the home's) and the engine open while it is read."""
    from generation.cache import default_cache_location
    from generation.progress import LogProgress
    from generation.runner import GenerationJob, run_generation

    gen = plan.gen
    report = LogProgress(context.log, every_s=20, prefix=f"generate {label}: ")

    def progress(state: Any) -> None:
        report(state)
        if not state.final:
            kill_point("generation_batch", label)  # tests only (module doc)

    job = GenerationJob.from_spec(gen, inputs.model_path, inputs.model_version)
    with run_generation(job, rows, default_cache_location(store.root()), progress=progress, stats=stats) as run:
        yield run.records


def _filter_and_write(plan: _Plan, store: CascadeStore, records: Any, stats: Any, schema: Any,
                      inputs: list[dict[str, Any]]) -> tuple[Any, Any]:
    """Filter the record stream (verifying where the use needs it) and write the versioned output."""
    from generation.filters import Verifier
    from rewards.cache import DEFAULT_CACHE_FILE
    from spec.storage import cache_url

    gen = plan.gen
    scores = cache_url() or store.root() / DEFAULT_CACHE_FILE  # the reward cache's default place, in the store's home
    verifier = (Verifier.from_registry(gen.verify.name, gen.threshold, reward_cache=scores, **gen.verify.options)
                if gen.verify else None)
    try:
        result = _filter(gen, plan.domain, records, verifier, schema, stats)
    finally:
        if verifier is not None:
            verifier.close()
    if verifier is not None:
        inputs = [*inputs, input_ref(f"reward/{gen.verify.name}", verifier.version, "rewards")]
    out = store.write_dataset(result.table, gen.name, rows_in=result.items_in, dropped=result.dropped,
                              inputs=inputs, code_version=plan.code, config=plan.config,
                              extra_files={"generation.json": result.summary()})
    return out, result


def _metadata(plan: _Plan, out: Any, result: Any) -> dict[str, Any]:
    summary = result.summary()
    meta = dataset_metadata(out.record, result.table.slice(0, 5).to_pylist())
    return meta | {"teacher": plan.model_text, "engine": plan.gen.engine.name, "generated": summary.get("generated", 0),
                   "cached": summary.get("cached", 0), "tokens_generated": summary.get("tokens", 0),
                   "generation": dg.MetadataValue.json(summary)}


def _generation_asset(plan: _Plan, timer: WorkTimer) -> dg.AssetsDefinition:
    gen = plan.gen

    @dg.asset(key=generation_key(gen.name), deps=plan.deps, group_name=GENERATIONS, code_version=plan.code,
              kinds={"parquet"}, description=plan.description)
    def generation(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from generation.pipeline import GenerationStats

        inputs = _read_inputs(context, plan, store)
        stats = GenerationStats()
        with timer.measure(context.asset_key.to_user_string()):
            with _records(context, plan, store, inputs, inputs.rows, stats, gen.name) as records:
                out, result = _filter_and_write(plan, store, records, stats, inputs.rows.schema,
                                                [inputs.input_ref, inputs.teacher_ref])
        return dg.MaterializeResult(data_version=dg.DataVersion(out.data_version), metadata=_metadata(plan, out, result))

    return generation


def _shard_op(plan: _Plan, k: int, timer: WorkTimer) -> dg.OpDefinition:
    gen = plan.gen

    @dg.op(name=f"generation_{gen.name}_shard_{k}", ins={f"dep_{i}": dg.In(dg.Nothing) for i in range(len(plan.deps))},
           out=dg.Out(dict),
           description=f"Shard {k}/{gen.shards} of generation {gen.name!r}: its rows prompted through the "
                       "generation cache, the samples written as a versioned shard dataset.")
    def _shard(context: dg.OpExecutionContext, store: CascadeStore) -> dict:
        from generation.pipeline import GenerationStats
        from generation.shards import records_table, shard_rows

        inputs = _read_inputs(context, plan, store)
        rows, positions = shard_rows(inputs.rows, k, gen.shards)
        stats = GenerationStats()
        with timer.measure(f"generations/{gen.name} shard {k}/{gen.shards}"):
            with _records(context, plan, store, inputs, rows, stats, f"{gen.name}_shard_{k}") as records:
                table = records_table(records, positions)
            out = store.write_dataset(table, f"{gen.name}_shards/{k}", rows_in=table.num_rows, dropped={},
                                      inputs=[inputs.input_ref, inputs.teacher_ref], code_version=plan.code,
                                      config={**plan.config, "shard": k, "shards": gen.shards},
                                      extra_files={"generation.json": stats.as_dict()})
        return {"path": str(out.folder), "data_version": out.data_version, "input": inputs.input_ref,
                "teacher": inputs.teacher_ref, "model_version": inputs.model_version, "rows": rows.num_rows,
                "stats": dataclasses.asdict(stats)}

    return _shard


def _merge_op(plan: _Plan, timer: WorkTimer) -> dg.OpDefinition:
    gen = plan.gen

    @dg.op(name=f"generation_{gen.name}_merge", ins={f"shard_{k}": dg.In(dict) for k in range(gen.shards)},
           description=f"The {gen.shards} shards of generation {gen.name!r} in input order, filtered as unsharded.")
    def _merge(context: dg.OpExecutionContext, store: CascadeStore, **shards: dict) -> dg.Output:
        import pyarrow.parquet as pq

        from generation.shards import merged_records, merged_stats

        parts = [shards[f"shard_{k}"] for k in range(gen.shards)]
        for what in ("input", "teacher"):  # every shard must have read the same rows and model
            versions = {p[what]["data_version"] for p in parts}
            if len(versions) > 1:
                raise dg.Failure(f"generation {gen.name!r}: its shards read different versions of their {what} "
                                 f"({', '.join(sorted(versions))}); rerun it")
        rows = _input_rows(parts[0]["input"]["path"], gen)
        streams = [pq.ParquetFile(Path(p["path"]) / "data.parquet").iter_batches(batch_size=4096) for p in parts]
        shard_inputs = [input_ref(f"{gen.name}_shards/{k}", p["data_version"], p["path"]) for k, p in enumerate(parts)]
        with timer.measure(f"generations/{gen.name} merge of {gen.shards} shards"):
            out, result = _filter_and_write(plan, store, merged_records(rows, streams),
                                            merged_stats(p["stats"] for p in parts), rows.schema,
                                            [parts[0]["input"], parts[0]["teacher"], *shard_inputs])
        meta = _metadata(plan, out, result) | {"shard_versions": dg.MetadataValue.json(
            {str(k): p["data_version"] for k, p in enumerate(parts)}), "shard_rows": dg.MetadataValue.json(
            {str(k): p["rows"] for k, p in enumerate(parts)})}
        return dg.Output(None, data_version=dg.DataVersion(out.data_version), metadata=meta)

    return _merge


def _sharded_generation_asset(plan: _Plan, timer: WorkTimer) -> dg.AssetsDefinition:
    """`generations/<name>` of an entry with `shards: N`: N shard steps, then the merge step."""
    from assets.shards import executor_name
    from generation.shards import SHARDING

    gen = plan.gen
    shard_ops = [_shard_op(plan, k, timer) for k in range(gen.shards)]
    merge = _merge_op(plan, timer)
    ins = {f"dep_{i}": dg.AssetIn(k, dagster_type=dg.Nothing) for i, k in enumerate(plan.deps)}

    @dg.graph_asset(key=generation_key(gen.name), group_name=GENERATIONS, ins=ins, kinds={"parquet"},
                    code_version=plan.code,
                    metadata={"executor": executor_name(plan.recipe), "shards": gen.shards, "sharding": SHARDING},
                    description=f"{plan.description} Generated in {gen.shards} shards ({SHARDING}), merged in input "
                                "order (same rows and data version as unsharded for the same samples).")
    def generation(**deps: Any) -> Any:
        # one Nothing input per upstream asset (not a fan-in list: Dagster cannot map a graph
        # input into a fan-in when the upstream asset runs in the same run)
        return merge(**{f"shard_{k}": op(**deps) for k, op in enumerate(shard_ops)})

    return generation


def build_generation_assets(recipe: Recipe, timer: WorkTimer) -> list[dg.AssetsDefinition]:
    plans = [_plan(recipe, gen) for gen in recipe.generations]
    return [(_sharded_generation_asset if p.gen.shards > 1 else _generation_asset)(p, timer) for p in plans]


__all__ = ["GENERATIONS", "build_generation_assets", "generation_key", "source_table_key", "teacher_stage"]
