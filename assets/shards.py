"""Sharded sources and the executor of the cascade job.

A source with `shards: N` (N > 1) has no `sources/raw_<name>` asset: its `curated/clean_<name>`
is a graph-backed asset of N shard steps and one merge step. Each shard step reads its share
of the file (curation.shards: a stable CRC32 of the raw line picks the shard), maps it onto
the canonical schema with quarantine, decontaminates it and computes the dedup fingerprints,
and writes a versioned shard dataset (`<data>/clean_<name>_shards/<k>/<version>/`, quarantine
beside it). The merge step deduplicates the union in source order, so `clean_<name>` has the
same rows and data version as the unsharded raw → clean path. The steps are ordinary Dagster
steps: any multi-process executor (multiprocess, Celery, Kubernetes) runs them side by side.

The executor is the recipe's `execution:` block (spec.execution) turned into a Dagster
executor here, never chosen in code; the UI shows it and the shard count on each asset.
"""


from typing import Any

import dagster as dg

from assets.common import BENCHMARKS, CURATED, SOURCES, WorkTimer, data_root, dataset_metadata, key, upstream_ref
from assets.sources import CURATION_CODE, ensure_file, file_asset_name, read_versioned
from spec.data import SourceSpec
from spec.hashing import code_version
from spec.recipe import Recipe

SHARDING = "crc32(raw line) mod shards"


def is_sharded(recipe: Recipe) -> bool:
    """Whether any source of the recipe is curated in shards."""
    return any(s.shards > 1 for s in recipe.sources)


def executor_name(recipe: Recipe) -> str:
    """The executor the recipe's runs use (`auto` resolved)."""
    return recipe.execution.resolved(is_sharded(recipe))


def executor_for(recipe: Recipe) -> dg.ExecutorDefinition:
    """The Dagster executor of the recipe's `execution:` block, its config validated here."""
    ex = recipe.execution
    name = executor_name(recipe)
    if name == "in_process":
        return dg.in_process_executor
    if name == "multiprocess":
        config: dict[str, Any] = {"max_concurrent": ex.max_concurrent} if ex.max_concurrent else {}
        return _configured(dg.multiprocess_executor, config, "multiprocess")
    if name == "celery":
        try:
            from dagster_celery import celery_executor
        except ImportError as err:
            raise dg.DagsterInvariantViolationError(
                "execution.executor is `celery` but dagster-celery is not installed: run `make celery`") from err
        config = {"broker": ex.celery.broker, "backend": ex.celery.backend}
        if ex.celery.include:
            config["include"] = list(ex.celery.include)
        if ex.celery.config_source:
            config["config_source"] = dict(ex.celery.config_source)
        return _configured(celery_executor, config, "celery")
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError as err:
        raise dg.DagsterInvariantViolationError(
            "execution.executor is `k8s` but dagster-k8s is not installed: run `make celery` (it adds dagster-k8s)") from err
    return _configured(k8s_job_executor, dict(ex.k8s), "k8s")


def _configured(executor: dg.ExecutorDefinition, config: dict[str, Any], name: str) -> dg.ExecutorDefinition:
    """`executor.configured(config)`, the config checked against the executor's schema now (at
    load, not when a run starts): a bad `execution:` block fails like any bad recipe field."""
    from dagster._config import process_config

    result = process_config(executor.config_schema.config_type, config)
    if not result.success:
        raise dg.DagsterInvalidConfigError(f"execution.{name}: invalid {name} executor config", result.errors, config)
    return executor.configured(config, name=name)


def execution_metadata(recipe: Recipe, spec: SourceSpec | None = None) -> dict[str, Any]:
    """Definition metadata the UI shows on an asset: the executor and, for a source, its shards."""
    meta: dict[str, Any] = {"executor": executor_name(recipe)}
    if spec is not None:
        meta["shards"] = spec.shards
        meta["sharding"] = SHARDING if spec.shards > 1 else "unsharded"
    return meta


def _clean_config(recipe: Recipe, spec: SourceSpec) -> dict[str, Any]:
    return {"source": spec.model_dump(mode="json", exclude={"shards"}),
            "decontam": recipe.curation.decontam.model_dump(), "dedup": recipe.curation.dedup.model_dump(),
            "benchmark_fields": {b.name: b.fields for b in recipe.benchmarks}}


def _shard_op(recipe: Recipe, spec: SourceSpec, k: int, timer: WorkTimer) -> dg.OpDefinition:
    bench_keys = {b.name: key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks}
    config = _clean_config(recipe, spec)

    @dg.op(name=f"clean_{spec.name}_shard_{k}", ins={"after": dg.In(dg.Nothing)}, out=dg.Out(dict),
           description=f"Shard {k}/{spec.shards} of {spec.name!r}: read, quarantine, decontaminate, fingerprint.")
    def _shard(context: dg.OpExecutionContext) -> dict:
        import numpy as np
        import pyarrow as pa

        import pyarrow.parquet as pq

        from assets.common import upstream_path
        from curation.decontam import BenchmarkIndex, decontaminate_table
        from curation.dedup import DedupParams
        from curation.shards import ORDINAL, fingerprints, load_shard
        from curation.versioning import write_versioned

        path = ensure_file(recipe, spec)
        benches = {b: pq.read_table(upstream_path(context, bk) / "data.parquet") for b, bk in bench_keys.items()}
        with timer.measure(f"curated/clean_{spec.name} shard {k}/{spec.shards}"):
            shard, digest = read_versioned(  # the version of the bytes this shard parsed
                f"source {spec.name!r}", path,
                lambda: load_shard(path, spec.format, spec.domain, spec.name, k, spec.shards, columns=spec.columns or None,
                                   split=spec.split, limit=spec.limit, reader=spec.reader))
            index = BenchmarkIndex.build(benches, n=recipe.curation.decontam.ngram,
                                         fields={b.name: b.fields for b in recipe.benchmarks})
            rows = shard.table.drop_columns([ORDINAL])
            kept_mask = np.ones(shard.table.num_rows, dtype=bool)
            _, hits = decontaminate_table(rows, index, recipe.curation.decontam.fields_for(rows.schema))
            ordinals = np.asarray(shard.table.column(ORDINAL))
            kept_mask[[h.row for h in hits]] = False
            table = fingerprints(shard.table.filter(pa.array(kept_mask)),
                                 DedupParams.from_dict(recipe.curation.dedup.model_dump()))
            dropped = dict(shard.dropped)
            for h in hits:
                dropped[f"contaminated:{h.benchmark}"] = dropped.get(f"contaminated:{h.benchmark}", 0) + 1
            out = write_versioned(
                table, data_root(), f"clean_{spec.name}_shards/{k}", rows_in=shard.rows_in, dropped=dropped,
                inputs=[{"asset": file_asset_name(spec), "data_version": digest, "path": str(path)},
                        *[upstream_ref(context, bk) for bk in bench_keys.values()]],
                code_version=code_version(CURATION_CODE, config), config={**config, "shard": k, "shards": spec.shards},
                extra_files={"quarantine.parquet": shard.quarantine,
                             "decontam_dropped.json": [h.as_report() | {"field": h.field, "ordinal": int(ordinals[h.row])}
                                                       for h in hits]})
        return {"path": str(out.folder), "data_version": out.data_version, "source_version": digest, "rows_in": shard.rows_in,
                "quarantined": shard.quarantine.num_rows, "format": shard.format, "reader": shard.reader}

    return _shard


def _merge_op(recipe: Recipe, spec: SourceSpec, timer: WorkTimer) -> dg.OpDefinition:
    config = _clean_config(recipe, spec)

    @dg.op(name=f"clean_{spec.name}_merge", ins={f"shard_{k}": dg.In(dict) for k in range(spec.shards)},
           description=f"Global exact + MinHash dedup of the {spec.shards} shards of {spec.name!r}, in source order.")
    def _merge(context: dg.OpExecutionContext, **shards: dict) -> dg.Output:
        import json
        from pathlib import Path

        import numpy as np
        import pyarrow.parquet as pq

        from curation.dedup import DedupParams
        from curation.shards import ORDINAL, merge_dedup, raw_positions
        from curation.versioning import write_versioned

        parts = [shards[f"shard_{k}"] for k in range(spec.shards)]
        if len({p["source_version"] for p in parts}) > 1:  # each shard read a different version of the file
            raise dg.Failure(f"source {spec.name!r} changed between the reads of its shards (versions "
                             f"{', '.join(p['source_version'] for p in parts)}); rerun when it is stable")
        with timer.measure(f"curated/clean_{spec.name} merge of {spec.shards} shards"):
            tables = [pq.read_table(Path(p["path"]) / "data.parquet") for p in parts]
            hits = [json.loads((Path(p["path"]) / "decontam_dropped.json").read_text()) for p in parts]
            result = merge_dedup(tables, DedupParams.from_dict(recipe.curation.dedup.model_dump()))
            valid = [np.concatenate([np.asarray(t.column(ORDINAL)), np.array([h["ordinal"] for h in hs], np.int64)])
                     for t, hs in zip(tables, hits)]
            flat = sorted((h for hs in hits for h in hs), key=lambda h: h["ordinal"])
            rows = raw_positions(valid, np.array([h["ordinal"] for h in flat], np.int64))
            report = [{"row": int(r), "benchmark": h["benchmark"], "ngram": h["ngram"], "field": h["field"]}
                      for r, h in zip(rows, flat)]
            dropped: dict[str, int] = {}
            for h in flat:
                dropped[f"contaminated:{h['benchmark']}"] = dropped.get(f"contaminated:{h['benchmark']}", 0) + 1
            for reason, n in result.dropped_counts().items():
                dropped[reason] = dropped.get(reason, 0) + n
            out = write_versioned(
                result.table, data_root(), f"clean_{spec.name}", rows_in=sum(len(v) for v in valid), dropped=dropped,
                inputs=[{"asset": f"clean_{spec.name}_shards/{k}", "data_version": p["data_version"], "path": p["path"]}
                        for k, p in enumerate(parts)],
                code_version=code_version(CURATION_CODE, config), config=config,
                extra_files={"decontam_dropped.json": report, "dedup_dropped.parquet": result.dropped})
        metadata = {**dataset_metadata(out.record, result.table.slice(0, 5).to_pylist()),
                    "quarantined": sum(p["quarantined"] for p in parts), "format": parts[0]["format"],
                    "reader": parts[0]["reader"], "shard_versions": dg.MetadataValue.json(
                        {str(k): p["data_version"] for k, p in enumerate(parts)})}
        return dg.Output(None, data_version=dg.DataVersion(out.data_version), metadata=metadata)

    return _merge


def sharded_clean_asset(recipe: Recipe, spec: SourceSpec, timer: WorkTimer) -> dg.AssetsDefinition:
    """`curated/clean_<name>` of a sharded source: N shard steps, then the merge step."""
    dep_keys = [key(SOURCES, file_asset_name(spec)), *[key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks]]
    shard_ops = [_shard_op(recipe, spec, k, timer) for k in range(spec.shards)]
    merge = _merge_op(recipe, spec, timer)
    ins = {f"dep_{i}": dg.AssetIn(k, dagster_type=dg.Nothing) for i, k in enumerate(dep_keys)}

    @dg.graph_asset(key=key(CURATED, f"clean_{spec.name}"), group_name=CURATED, ins=ins, kinds={"parquet"},
                    code_version=code_version(CURATION_CODE, _clean_config(recipe, spec)),
                    metadata=execution_metadata(recipe, spec),
                    description=f"{spec.name}: read in {spec.shards} shards ({SHARDING}); per shard canonical rows "
                                f"with quarantine and rows sharing a {recipe.curation.decontam.ngram}-gram with any "
                                "benchmark removed; then exact and MinHash near-duplicates removed over all shards "
                                "in source order (same rows and data version as unsharded).")
    def clean(**deps: Any) -> Any:
        after = list(deps.values())
        return merge(**{f"shard_{k}": op(after=after) for k, op in enumerate(shard_ops)})

    return clean
