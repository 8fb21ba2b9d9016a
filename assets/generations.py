"""Generation assets: a model's responses to a source's rows, made and filtered in the platform.

One asset per `generations:` entry of the recipe (spec.generation). It prompts the curated
(decontaminated, deduplicated) rows of its input source through the generation engine and the
generation cache (generation.pipeline), then filters: rejection sampling into SFT rows, pass-rate
filtering of RL prompts, or SWE patch sampling (generation.filters). Stages list it in their
`sources:` like a source.

The teacher may be a checkpoint asset of the same recipe: the asset then depends on it, so a
retrained teacher makes exactly this generation and what is built from it stale; a built-in
model or folder is versioned by its content. The code version covers the generation library,
the entry's settings and the verifier's source version (editing the verifier re-filters, from
the cache, with no new generation). The data version is the content hash of the output table.
"""


from typing import Any

import dagster as dg

from assets.common import CHECKPOINTS, CURATED, WorkTimer, data_root, dataset_metadata, key, upstream_path, upstream_ref
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


def _engine(gen: GenerationSpec, model_path: str) -> Any:
    from generation.engine import build_engine

    if gen.engine.name == "openai":
        return build_engine("openai", gen.model, base_url=gen.engine.base_url, api_key_env=gen.engine.api_key_env,
                            **gen.engine.options)
    return build_engine(gen.engine.name, model_path, **gen.engine.options)


def _filter(gen: GenerationSpec, domain: str, records: Any, verifier: Any, schema: Any, stats: Any) -> Any:
    from generation.filters import PassRateBand, pass_rate_filter, rejection_sample, swe_patch_sample

    if gen.use == "rejection":
        return rejection_sample(records, domain, verifier, gen.max_per_prompt, source=gen.name, stats=stats)
    if gen.use == "pass_rate":
        band = PassRateBand(gen.min_pass_rate, gen.max_pass_rate, gen.drop_unsolved, gen.drop_solved)
        return pass_rate_filter(records, verifier, band, schema=schema, stats=stats)
    return swe_patch_sample(records, stats=stats)


def _generation_asset(recipe: Recipe, gen: GenerationSpec, timer: WorkTimer) -> dg.AssetsDefinition:
    from rewards.registry import reward_code_versions

    input_key = key(CURATED, f"clean_{gen.input}")
    teacher = teacher_stage(recipe, gen)
    teacher_key = key(CHECKPOINTS, teacher) if teacher else None
    domain = recipe.source(gen.input).domain
    config = {"generation": gen.model_dump(mode="json"), "teacher": teacher,
              "verifier": reward_code_versions([gen.verify]) if gen.verify else {}}
    code = code_version(GENERATION_CODE, config)
    model_text = f"checkpoint {teacher!r}" if teacher else repr(gen.model)

    @dg.asset(key=generation_key(gen.name), deps=[k for k in (input_key, teacher_key) if k], group_name=GENERATIONS,
              code_version=code, kinds={"parquet"},
              description=f"{gen.use} of {gen.input!r}: {gen.samples} sample(s) per prompt and mode "
                          f"({', '.join(gen.modes)}) from {model_text} on the {gen.engine.name} engine"
                          + (f", verified by {gen.verify.name!r} (>= {gen.threshold:g})." if gen.verify else "."))
    def generation(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        import pyarrow.parquet as pq

        from curation.versioning import write_versioned
        from generation.cache import GenerationCache
        from generation.engine import Sampling
        from generation.filters import Verifier
        from generation.pipeline import GenerationStats, generate_rows
        from generation.progress import LogProgress
        from trainer.models import model_folder

        rows = pq.read_table(upstream_path(context, input_key) / "data.parquet")
        rows = rows.slice(0, gen.limit) if gen.limit else rows
        if teacher_key is not None:
            teacher_ref = upstream_ref(context, teacher_key)
            model_path, model_version = teacher_ref["path"], teacher_ref["data_version"]
        elif gen.engine.name == "openai":
            model_path, model_version = str(gen.model), f"served:{gen.model}"
            teacher_ref = input_ref(f"model/{gen.model}", model_version, gen.engine.base_url)
        else:
            name = gen.model if gen.model in ("tiny", "smollm2") else str(recipe.resolve(str(gen.model)))
            folder, model_version = model_folder(name)
            model_path, teacher_ref = str(folder), input_ref(f"model/{gen.model}", model_version, folder)
        verifier = (Verifier.from_registry(gen.verify.name, gen.threshold, reward_cache=None, **gen.verify.options)
                    if gen.verify else None)
        sampling = Sampling(**gen.sampling.model_dump())
        stats = GenerationStats()
        with timer.measure(context.asset_key.to_user_string()), GenerationCache() as cache:
            engine = _engine(gen, model_path)
            try:
                records = generate_rows(engine, model_version, rows, gen.modes, gen.samples, sampling, cache,
                                        progress=LogProgress(context.log, every_s=20), stats=stats)
                result = _filter(gen, domain, records, verifier, rows.schema, stats)
            finally:
                engine.close()
                if verifier is not None:
                    verifier.close()
            inputs = [upstream_ref(context, input_key), teacher_ref]
            if verifier is not None:
                inputs.append(input_ref(f"reward/{gen.verify.name}", verifier.version, "rewards"))
            out = write_versioned(result.table, data_root(), gen.name, rows_in=result.items_in, dropped=result.dropped,
                                  inputs=inputs, code_version=code, config=config,
                                  extra_files={"generation.json": result.summary()})
        summary = result.summary()
        meta = dataset_metadata(out.record, result.table.slice(0, 5).to_pylist())
        meta |= {"teacher": model_text, "engine": gen.engine.name, "generated": summary.get("generated", 0),
                 "cached": summary.get("cached", 0), "tokens_generated": summary.get("tokens", 0),
                 "generation": dg.MetadataValue.json(summary)}
        return dg.MaterializeResult(data_version=dg.DataVersion(out.data_version), metadata=meta)

    return generation


def build_generation_assets(recipe: Recipe, timer: WorkTimer) -> list[dg.AssetsDefinition]:
    return [_generation_asset(recipe, gen, timer) for gen in recipe.generations]


__all__ = ["GENERATIONS", "build_generation_assets", "generation_key", "source_table_key", "teacher_stage"]
