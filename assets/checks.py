"""Data-quality asset checks on every curated table and training corpus (all blocking, so a
corpus that fails never reaches a trainer):

  no_benchmark_overlap  re-scans the written corpus: zero n-grams shared with any benchmark
  row_accounting        lineage-record identity rows_in = rows_out + Σ dropped, and the parquet agrees
  schema                the parquet has the canonical schema of its kind
  rows_kept             at least `min_rows` rows kept (also on every raw source): an empty file, or a
                        source whose every row is quarantined (a ShareGPT file declared `openai`),
                        fails here, naming the top quarantine reasons, instead of succeeding empty
"""


from pathlib import Path
from typing import Callable

import dagster as dg
import pyarrow as pa

from assets.common import (BENCHMARKS, CORPORA, CURATED, DECONTAM_PREFIX, SOURCES, WorkTimer, is_load_record, key,
                           top_reasons)
from assets.store import CascadeStore, Context
from spec.lineage import read_record
from spec.paths import resolve_home_path
from spec.recipe import Recipe


def _read(context: Context, store: CascadeStore, asset_key: dg.AssetKey) -> tuple[Path, pa.Table]:
    import pyarrow.parquet as pq

    folder = store.upstream_path(context, asset_key)
    return folder, pq.read_table(folder / "data.parquet")


def _benchmarks(context: Context, store: CascadeStore, recipe: Recipe) -> dict[str, pa.Table]:
    import pyarrow.parquet as pq

    out = {}
    for b in recipe.benchmarks:
        table = pq.read_table(store.upstream_path(context, key(BENCHMARKS, f"bench_{b.name}")) / "data.parquet")
        out[b.name] = table
    return out


def _overlap_check(recipe: Recipe, asset_key: dg.AssetKey, timer: WorkTimer) -> dg.AssetChecksDefinition:
    bench_keys = [key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks]

    @dg.asset_check(asset=asset_key, name="no_benchmark_overlap", blocking=True, additional_deps=bench_keys,
                    description=f"No row shares a {recipe.curation.decontam.ngram}-gram with any benchmark row.")
    def no_benchmark_overlap(context: dg.AssetCheckExecutionContext, store: CascadeStore) -> dg.AssetCheckResult:
        from curation.decontam import decontaminate_table
        from curation.decontam_index import BenchmarkIndex

        _, table = _read(context, store, asset_key)
        with timer.measure():
            index = BenchmarkIndex.build(_benchmarks(context, store, recipe), n=recipe.curation.decontam.ngram,
                                         fields={b.name: b.fields for b in recipe.benchmarks})
            _, hits = decontaminate_table(table, index, recipe.curation.decontam.fields_for(table.schema))
        return dg.AssetCheckResult(passed=not hits, metadata={
            "overlapping_rows": len(hits), "examples": dg.MetadataValue.json([h.as_report() for h in hits[:5]])})

    return no_benchmark_overlap


def _accounting_check(asset_key: dg.AssetKey) -> dg.AssetChecksDefinition:
    from curation.versioning import read_dataset_record

    @dg.asset_check(asset=asset_key, name="row_accounting", blocking=True,
                    description="rows_in = rows_out + Σ dropped, and the parquet holds rows_out rows.")
    def row_accounting(context: dg.AssetCheckExecutionContext, store: CascadeStore) -> dg.AssetCheckResult:
        folder, table = _read(context, store, asset_key)
        record = read_dataset_record(folder)
        dropped = sum(record["dropped"].values())
        ok = record["rows_in"] == record["rows_out"] + dropped and table.num_rows == record["rows_out"]
        return dg.AssetCheckResult(passed=ok, metadata={
            "rows_in": record["rows_in"], "rows_out": record["rows_out"], "dropped": dropped,
            "parquet_rows": table.num_rows})

    return row_accounting


def kept_reasons(record: dict, inputs: list[dict]) -> dict[str, int]:
    """Why rows were not kept: the record's drops, and the quarantine of the raw reads among
    `inputs` (the records of its inputs: a curated table's `raw_<source>` or its shards)."""
    reasons = dict(record.get("dropped") or {})
    for upstream in inputs:
        if is_load_record(upstream):
            for reason, count in (upstream.get("dropped") or {}).items():
                if not reason.startswith(DECONTAM_PREFIX):  # counted again by the curated table itself
                    reasons[reason] = reasons.get(reason, 0) + count
    return reasons


def rows_kept_result(asset: str, record: dict, inputs: list[dict], min_rows: int) -> dg.AssetCheckResult:
    """Pass when `record` kept at least `min_rows` rows; else the count and the top reasons."""
    reasons = kept_reasons(record, inputs)
    kept, rows_in = record["rows_out"], record["rows_in"]
    passed = kept >= min_rows
    why = ", ".join(top_reasons(reasons)) or ("the file has no rows" if not rows_in else "no drops recorded")
    text = (f"{asset}: {kept} of {rows_in} rows kept" + ("" if passed else f", fewer than min_rows={min_rows}")
            + f"; top reasons: {why}")
    return dg.AssetCheckResult(passed=passed, description=text, metadata={
        "rows_in": rows_in, "rows_kept": kept, "min_rows": min_rows,
        "top_reasons": dg.MetadataValue.json(top_reasons(reasons))})


def _rows_kept_check(asset_key: dg.AssetKey, min_rows: int, setting: str) -> dg.AssetChecksDefinition:
    from curation.versioning import read_dataset_record

    @dg.asset_check(asset=asset_key, name="rows_kept", blocking=True,
                    description=f"At least {min_rows} rows kept (`{setting}`); a failure names the top quarantine "
                                "and drop reasons.")
    def rows_kept(context: dg.AssetCheckExecutionContext, store: CascadeStore) -> dg.AssetCheckResult:
        record = read_dataset_record(store.upstream_path(context, asset_key))
        inputs = [read_record(resolve_home_path(i["path"])) or {} for i in record.get("inputs", []) if i.get("path")]
        return rows_kept_result(asset_key.to_user_string(), record, inputs, min_rows)

    return rows_kept


def _schema_check(asset_key: dg.AssetKey, expected: Callable[[], pa.Schema]) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=asset_key, name="schema", blocking=True,
                    description="The parquet has every canonical field with its canonical type.")
    def schema(context: dg.AssetCheckExecutionContext, store: CascadeStore) -> dg.AssetCheckResult:
        _, table = _read(context, store, asset_key)
        want = expected()
        problems = [f"{f.name}: missing" if f.name not in table.schema.names
                    else f"{f.name}: {table.schema.field(f.name).type} != {f.type}"
                    for f in want
                    if f.name not in table.schema.names or not table.schema.field(f.name).type.equals(f.type)]
        return dg.AssetCheckResult(passed=not problems, metadata={"problems": dg.MetadataValue.json(problems)})

    return schema


def build_data_checks(recipe: Recipe, timer: WorkTimer) -> list[dg.AssetChecksDefinition]:
    from curation.schemas import DOMAIN_SCHEMAS, RL_SCHEMA, SFT_SCHEMA

    targets: list[tuple[dg.AssetKey, Callable[[], pa.Schema]]] = []
    for s in recipe.sources:
        targets.append((key(CURATED, f"clean_{s.name}"), lambda d=s.domain: DOMAIN_SCHEMAS[d]))
    for stage in recipe.sft_stages:
        targets.append((key(CORPORA, f"{stage.name}_data"), lambda: SFT_SCHEMA))
    if recipe.reward_model:
        targets.append((key(CORPORA, f"{recipe.reward_model.name}_data"), lambda: DOMAIN_SCHEMAS["preference"]))
    for stage in recipe.rl_stages:
        targets.append((key(CORPORA, f"{stage.name}_prompts"), lambda: RL_SCHEMA))
    checks = []
    for asset_key, schema in targets:
        checks += [_overlap_check(recipe, asset_key, timer), _accounting_check(asset_key), _schema_check(asset_key, schema)]
    corpus = recipe.curation.min_corpus_rows
    for s in recipe.sources:
        where = f"sources[{s.name}].min_rows"
        checks += [_rows_kept_check(key(SOURCES, f"raw_{s.name}"), s.min_rows, where)] if s.shards == 1 else []
        checks.append(_rows_kept_check(key(CURATED, f"clean_{s.name}"), s.min_rows, where))
    checks += [_rows_kept_check(k, corpus, "curation.min_corpus_rows") for k, _ in targets if k.path[0] == CORPORA]
    return checks
