"""Curated tables and training corpora: decontaminated, deduplicated sources → SFT stage
blends, reward-model pairs and RL prompt sets.

Disjointness follows the data flow: an RL prompt set drops prompts that appear in any SFT
corpus or in an earlier RL stage's set. Dependencies therefore only point downstream, so a
swapped math source touches the math prompt set and later stages, never the SFT corpora.
"""


from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa

from assets.common import BENCHMARKS, CHECKPOINTS, CORPORA, CURATED, SOURCES, WorkTimer, dataset_metadata, key
from assets.generations import source_table_key
from assets.shards import execution_metadata, sharded_clean_asset
from assets.store import CascadeStore
from spec.hashing import code_version
from spec.recipe import Recipe, RLStageSpec, SFTStageSpec

CURATION_CODE = ("curation",)


def read_data(folder: Path) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(Path(folder) / "data.parquet")


def token_counter(model_dir: Path):
    """Token lengths under the policy's own tokenizer (length caps are in policy tokens)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return lambda texts: [len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def _materialize(out, table: pa.Table) -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion(out.data_version),
                                metadata=dataset_metadata(out.record, table.slice(0, 5).to_pylist()))


def _clean_asset(recipe: Recipe, name: str, timer: WorkTimer) -> dg.AssetsDefinition:
    raw_key = key(SOURCES, f"raw_{name}")
    bench_keys = {b.name: key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks}
    config = {"decontam": recipe.curation.decontam.model_dump(), "dedup": recipe.curation.dedup.model_dump(),
              "benchmark_fields": {b.name: b.fields for b in recipe.benchmarks}}

    @dg.asset(key=key(CURATED, f"clean_{name}"), deps=[raw_key, *bench_keys.values()], group_name=CURATED,
              code_version=code_version(CURATION_CODE, config), kinds={"parquet"},
              metadata=execution_metadata(recipe, recipe.source(name)),
              description=f"{name}: rows sharing a {recipe.curation.decontam.ngram}-gram with any benchmark "
                          "removed, then exact and MinHash near-duplicates removed.")
    def clean(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from curation.decontam import decontaminate_table
        from curation.decontam_index import BenchmarkIndex
        from curation.dedup import dedup
        from curation.dedup_params import DedupParams
        from curation.accounting import RowAccount

        raw = read_data(store.upstream_path(context, raw_key))
        benches = {b: read_data(store.upstream_path(context, k)) for b, k in bench_keys.items()}
        with timer.measure(context.asset_key.to_user_string()):
            index = BenchmarkIndex.build(benches, n=recipe.curation.decontam.ngram,
                                         fields={b.name: b.fields for b in recipe.benchmarks})
            kept, hits = decontaminate_table(raw, index, recipe.curation.decontam.fields_for(raw.schema))
            account = RowAccount(raw.num_rows)
            account.drop_all([h.benchmark for h in hits], prefix="contaminated:")
            params = DedupParams.from_dict(recipe.curation.dedup.model_dump())
            result = dedup([kept], params, fields=params.fields_for(recipe.source(name).domain))
            account.drop_all(result.dropped_counts(0))
            out = store.write_dataset(
                result.tables[0], f"clean_{name}", rows_in=account.rows_in, dropped=account.dropped,
                inputs=[store.upstream_ref(context, k) for k in [raw_key, *bench_keys.values()]],
                code_version=code_version(CURATION_CODE, config), config=config,
                extra_files={"decontam_dropped.json": [h.as_report() | {"field": h.field} for h in hits],
                             "dedup_dropped.parquet": result.dropped},
            )
        return _materialize(out, result.tables[0])

    return clean


def _sft_data_asset(recipe: Recipe, stage: SFTStageSpec, timer: WorkTimer) -> dg.AssetsDefinition:
    clean_keys = {s: source_table_key(recipe, s) for s in stage.sources}
    base_key = key(CHECKPOINTS, "base_model")  # its tokenizer measures the length caps
    config = {"stage": stage.model_dump(exclude={"train"}), "swe": recipe.curation.swe.model_dump(), "seed": recipe.seed}

    @dg.asset(key=key(CORPORA, f"{stage.name}_data"), deps=[*clean_keys.values(), base_key], group_name=CORPORA,
              code_version=code_version(CURATION_CODE, config), kinds={"parquet"},
              description=f"SFT corpus of {stage.name!r}: ChatML rows (think and no-think), upsampled per domain, "
                          f"capped at {stage.max_tokens} policy tokens.")
    def sft_data(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from curation.blends import BlendConfig, blend_sft

        tables = {s: (recipe.source(s).domain, read_data(store.upstream_path(context, k))) for s, k in clean_keys.items()}
        with timer.measure(context.asset_key.to_user_string()):
            caps = {s: recipe.source(s).max_responses_per_prompt for s in stage.sources
                    if recipe.generation(s) is None and recipe.source(s).max_responses_per_prompt}
            blend = blend_sft(tables, BlendConfig.from_recipe(stage, recipe.curation.swe, recipe.seed, caps),
                              count_tokens=token_counter(store.upstream_path(context, base_key)))
            out = store.write_dataset(
                blend.table, f"{stage.name}_data", rows_in=blend.rows_in, dropped=blend.dropped,
                inputs=[store.upstream_ref(context, k) for k in clean_keys.values()],
                code_version=code_version(CURATION_CODE, config), config=config)
        return _materialize(out, blend.table)

    return sft_data


def _rm_data_asset(recipe: Recipe, timer: WorkTimer) -> dg.AssetsDefinition:
    spec = recipe.reward_model
    assert spec is not None
    clean_keys = [source_table_key(recipe, s) for s in spec.sources]

    @dg.asset(key=key(CORPORA, f"{spec.name}_data"), deps=clean_keys, group_name=CORPORA,
              code_version=code_version(CURATION_CODE, spec.sources), kinds={"parquet"},
              description="Preference pairs (prompt, chosen, rejected) the reward model is trained on.")
    def rm_data(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from curation.dedup import dedup
        from curation.dedup_params import DedupParams

        tables = [read_data(store.upstream_path(context, k)) for k in clean_keys]
        with timer.measure(context.asset_key.to_user_string()):
            params = DedupParams.from_dict(recipe.curation.dedup.model_dump())
            result = dedup(tables, params, fields=params.fields_for("preference"))
            table = pa.concat_tables(result.tables)
            dropped: dict[str, int] = {}
            for i in range(len(tables)):
                for reason, n in result.dropped_counts(i).items():
                    dropped[reason] = dropped.get(reason, 0) + n
            out = store.write_dataset(table, f"{spec.name}_data", rows_in=sum(t.num_rows for t in tables),
                                      dropped=dropped, inputs=[store.upstream_ref(context, k) for k in clean_keys],
                                      code_version=code_version(CURATION_CODE, spec.sources),
                                      config={"sources": spec.sources})
        return _materialize(out, table)

    return rm_data


def _rl_prompts_asset(recipe: Recipe, stage: RLStageSpec, earlier: list[str], timer: WorkTimer) -> dg.AssetsDefinition:
    clean_keys = {s: source_table_key(recipe, s) for s in stage.sources}
    sft_keys = [key(CORPORA, f"{s.name}_data") for s in recipe.sft_stages]
    earlier_keys = [key(CORPORA, f"{e}_prompts") for e in earlier]
    config = {"stage": stage.model_dump(exclude={"train", "rewards"}), "swe": recipe.curation.swe.model_dump(),
              "seed": recipe.seed}

    @dg.asset(key=key(CORPORA, f"{stage.name}_prompts"), deps=[*clean_keys.values(), *sft_keys, *earlier_keys],
              group_name=CORPORA, code_version=code_version(CURATION_CODE, config), kinds={"parquet"},
              description=f"RL prompts of {stage.name!r} ({stage.kind}) with the columns its verifier needs; "
                          "disjoint from every SFT corpus and earlier RL stage.")
    def rl_prompts(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from curation.prompts import PromptSetConfig, rl_prompt_set

        tables = {s: (recipe.source(s).domain, read_data(store.upstream_path(context, k))) for s, k in clean_keys.items()}
        exclude_sft = [read_data(store.upstream_path(context, k)) for k in sft_keys]
        exclude_rl = {e: read_data(store.upstream_path(context, k)) for e, k in zip(earlier, earlier_keys)}
        with timer.measure(context.asset_key.to_user_string()):
            result = rl_prompt_set(tables, PromptSetConfig.from_recipe(stage, recipe.curation.swe, recipe.seed),
                                   exclude_sft=exclude_sft, exclude_rl=exclude_rl)
            out = store.write_dataset(
                result.table, f"{stage.name}_prompts", rows_in=result.rows_in, dropped=result.dropped,
                inputs=[store.upstream_ref(context, k) for k in [*clean_keys.values(), *sft_keys, *earlier_keys]],
                code_version=code_version(CURATION_CODE, config), config=config)
        return _materialize(out, result.table)

    return rl_prompts


def build_corpus_assets(recipe: Recipe, timer: WorkTimer) -> list[dg.AssetsDefinition]:
    defs: list[Any] = [_clean_asset(recipe, s.name, timer) if s.shards == 1 else sharded_clean_asset(recipe, s, timer)
                       for s in recipe.sources]
    defs += [_sft_data_asset(recipe, stage, timer) for stage in recipe.sft_stages]
    if recipe.reward_model:
        defs.append(_rm_data_asset(recipe, timer))
    earlier: list[str] = []
    for stage in recipe.rl_stages:
        defs.append(_rl_prompts_asset(recipe, stage, list(earlier), timer))
        earlier.append(stage.name)
    return defs
