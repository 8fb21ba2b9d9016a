"""Sharded sources and the executor of the cascade job.

A source with `shards: N` (N > 1) has no `sources/raw_<name>` asset: its `curated/clean_<name>`
is a graph-backed asset of the steps of curation.shards, each writing versioned parquet under
`<data>/`:

* N shard steps `clean_<name>_shard_<k>`: read shard k, quarantine, decontaminate, dedup keys
  split into N key partitions (`clean_<name>_shards/<k>/`, keys and quarantine beside the rows);
* N partition steps `clean_<name>_dedup_<j>`: candidate pairs of key partition j, confirmed on
  the candidate rows' texts (`clean_<name>_edges/<j>/`);
* one cluster step `clean_<name>_cluster`: connected components of the edges, the rows to
  remove (`clean_<name>_removed/`);
* one assemble step `clean_<name>_assemble`: the shards merged in source order without the
  removed rows, streamed to `clean_<name>/` (its version hashed from the written file).

`clean_<name>` has the same rows and data version as the unsharded raw → clean path, which
runs the same dedup stages in one process. No step holds the corpus: shard and partition steps
hold 1/N of it, the cluster step the duplicate pairs, the assemble step a few record batches.
The steps are ordinary Dagster steps: any multi-process executor (multiprocess, Celery,
Kubernetes) runs them side by side.

The executor is the recipe's `execution:` block (spec.execution) turned into a Dagster
executor here, never chosen in code; the UI shows it and the shard count on each asset.
"""


from typing import Any

import dagster as dg

from assets.common import BENCHMARKS, CURATED, SOURCES, WorkTimer, dataset_metadata, key
from assets.sources import CURATION_CODE, ensure_file, file_asset_name, read_versioned
from assets.store import CascadeStore
from spec.data import SourceSpec
from spec.hashing import code_version
from spec.recipe import Recipe

SHARDING = "crc32(raw line) mod shards"


def is_sharded(recipe: Recipe) -> bool:
    """Whether any source of the recipe is curated, or any generation made, in shards."""
    return any(s.shards > 1 for s in recipe.sources) or any(g.shards > 1 for g in recipe.generations)


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


def _params(recipe: Recipe) -> Any:
    from curation.dedup_params import DedupParams

    return DedupParams.from_dict(recipe.curation.dedup.model_dump())


def _version(out: Any, **extra: Any) -> dict[str, Any]:
    return {"asset": out.record["asset"], "path": str(out.folder), "data_version": out.data_version, **extra}


def _shard_op(recipe: Recipe, spec: SourceSpec, k: int, deps: int, timer: WorkTimer) -> dg.OpDefinition:
    bench_keys = {b.name: key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks}
    config = _clean_config(recipe, spec)

    # One Nothing input per upstream asset: a fan-in list of them fails when they run in the same run.
    @dg.op(name=f"clean_{spec.name}_shard_{k}", ins={f"dep_{i}": dg.In(dg.Nothing) for i in range(deps)},
           out=dg.Out(dict),
           description=f"Shard {k}/{spec.shards} of {spec.name!r}: read, quarantine, decontaminate, dedup keys.")
    def _shard(context: dg.OpExecutionContext, store: CascadeStore) -> dict:
        import pyarrow.parquet as pq

        from curation.decontam_index import BenchmarkIndex
        from curation.shards import ORDINAL, ROW_GROUP_ROWS, curate_shard

        path = ensure_file(recipe, spec)
        benches = {b: pq.read_table(store.upstream_path(context, bk) / "data.parquet") for b, bk in bench_keys.items()}
        with timer.measure(f"curated/clean_{spec.name} shard {k}/{spec.shards}"):
            index = BenchmarkIndex.build(benches, n=recipe.curation.decontam.ngram,
                                         fields={b.name: b.fields for b in recipe.benchmarks})
            shard, digest = read_versioned(f"source {spec.name!r}", path, lambda: curate_shard(
                path, spec.model_dump(), spec.domain, k, spec.shards, index, recipe.curation.decontam.fields_for,
                _params(recipe), partitions=spec.shards))
            ordinals = shard.load.table.column(ORDINAL).to_pylist()
            out = store.write_dataset(
                shard.table, f"clean_{spec.name}_shards/{k}", rows_in=shard.load.rows_in,
                dropped=shard.dropped, row_group_rows=ROW_GROUP_ROWS,
                inputs=[{"asset": file_asset_name(spec), "data_version": digest, "path": str(path)},
                        *[store.upstream_ref(context, bk) for bk in bench_keys.values()]],
                code_version=code_version(CURATION_CODE, config), config={**config, "shard": k, "shards": spec.shards},
                extra_files={"quarantine.parquet": shard.load.quarantine,
                             **{f"keys_{j}.parquet": keys for j, keys in enumerate(shard.keys)},
                             "decontam_dropped.json": [h.as_report() | {"field": h.field, "ordinal": ordinals[h.row]}
                                                       for h in shard.hits]})
        return _version(out, source_version=digest, rows_in=shard.load.rows_in, format=shard.load.format,
                        reader=shard.load.reader, valid=shard.load.table.num_rows)

    return _shard


def _dedup_op(recipe: Recipe, spec: SourceSpec, j: int, timer: WorkTimer) -> dg.OpDefinition:
    config = _clean_config(recipe, spec)

    @dg.op(name=f"clean_{spec.name}_dedup_{j}", ins={f"shard_{k}": dg.In(dict) for k in range(spec.shards)},
           out=dg.Out(dict), description=f"Key partition {j}/{spec.shards} of {spec.name!r}: candidate duplicate "
                                         "pairs, confirmed by exact text or exact Jaccard.")
    def _dedup(context: dg.OpExecutionContext, store: CascadeStore, **shards: dict) -> dict:
        from pathlib import Path

        import pyarrow.parquet as pq

        from curation.shards import ShardTexts, confirm_partition

        parts = [shards[f"shard_{k}"] for k in range(spec.shards)]
        params = _params(recipe)
        with timer.measure(f"curated/clean_{spec.name} dedup partition {j}/{spec.shards}"):
            keys = [pq.read_table(Path(p["path"]) / f"keys_{j}.parquet") for p in parts]
            texts = ShardTexts({k: Path(p["path"]) / "data.parquet" for k, p in enumerate(parts)},
                               params.fields_for(spec.domain))
            edges = confirm_partition(keys, texts, params)
            out = store.write_dataset(edges, f"clean_{spec.name}_edges/{j}", rows_in=edges.num_rows,
                                      dropped={}, inputs=parts, code_version=code_version(CURATION_CODE, config),
                                      config={**config, "partition": j, "partitions": spec.shards})
        return _version(out)

    return _dedup


def _cluster_op(recipe: Recipe, spec: SourceSpec, timer: WorkTimer) -> dg.OpDefinition:
    config = _clean_config(recipe, spec)

    @dg.op(name=f"clean_{spec.name}_cluster", ins={f"part_{j}": dg.In(dict) for j in range(spec.shards)},
           out=dg.Out(dict), description=f"Connected components of {spec.name!r}'s duplicate pairs: each keeps its "
                                         "earliest row.")
    def _cluster(context: dg.OpExecutionContext, store: CascadeStore, **parts: dict) -> dict:
        from pathlib import Path

        import pyarrow.parquet as pq

        from curation.dedup_stages import cluster

        edges = [parts[f"part_{j}"] for j in range(spec.shards)]
        with timer.measure(f"curated/clean_{spec.name} cluster"):
            removed = cluster([pq.read_table(Path(e["path"]) / "data.parquet") for e in edges])
            out = store.write_dataset(removed, f"clean_{spec.name}_removed", rows_in=removed.num_rows,
                                      dropped={}, inputs=edges, code_version=code_version(CURATION_CODE, config),
                                      config=config)
        return _version(out)

    return _cluster


def _assemble_op(recipe: Recipe, spec: SourceSpec, timer: WorkTimer) -> dg.OpDefinition:
    config = _clean_config(recipe, spec)

    @dg.op(name=f"clean_{spec.name}_assemble",
           ins={"removed": dg.In(dict), **{f"shard_{k}": dg.In(dict) for k in range(spec.shards)}},
           description=f"The {spec.shards} shards of {spec.name!r} merged in source order without the removed rows.")
    def _assemble(context: dg.OpExecutionContext, store: CascadeStore, removed: dict, **shards: dict) -> dg.Output:
        from pathlib import Path

        import pyarrow.parquet as pq

        from curation.schemas import DOMAIN_SCHEMAS
        from curation.shards import write_clean

        parts = [shards[f"shard_{k}"] for k in range(spec.shards)]
        if len({p["source_version"] for p in parts}) > 1:  # each shard read a different version of the file
            raise dg.Failure(f"source {spec.name!r} changed between the reads of its shards (versions "
                             f"{', '.join(p['source_version'] for p in parts)}); rerun when it is stable")
        with timer.measure(f"curated/clean_{spec.name} assemble of {spec.shards} shards"):
            out = write_clean([Path(p["path"]) for p in parts], pq.read_table(Path(removed["path"]) / "data.parquet"),
                              DOMAIN_SCHEMAS[spec.domain], store.data_root(), f"clean_{spec.name}",
                              valid_rows=sum(p["valid"] for p in parts), inputs=[*parts, removed],
                              code_version=code_version(CURATION_CODE, config), config=config)
            preview = pq.ParquetFile(out.path).read_row_group(0).slice(0, 5).to_pylist() if out.record["rows_out"] else []
        metadata = {**dataset_metadata(out.record, preview),
                    "quarantined": sum(p["rows_in"] - p["valid"] for p in parts), "format": parts[0]["format"],
                    "reader": parts[0]["reader"], "shard_versions": dg.MetadataValue.json(
                        {str(k): p["data_version"] for k, p in enumerate(parts)})}
        return dg.Output(None, data_version=dg.DataVersion(out.data_version), metadata=metadata)

    return _assemble


def sharded_clean_asset(recipe: Recipe, spec: SourceSpec, timer: WorkTimer) -> dg.AssetsDefinition:
    """`curated/clean_<name>` of a sharded source: shard, dedup-partition, cluster and assemble steps."""
    dep_keys = [key(SOURCES, file_asset_name(spec)), *[key(BENCHMARKS, f"bench_{b.name}") for b in recipe.benchmarks]]
    shard_ops = [_shard_op(recipe, spec, k, len(dep_keys), timer) for k in range(spec.shards)]
    dedup_ops = [_dedup_op(recipe, spec, j, timer) for j in range(spec.shards)]
    cluster, assemble = _cluster_op(recipe, spec, timer), _assemble_op(recipe, spec, timer)
    ins = {f"dep_{i}": dg.AssetIn(k, dagster_type=dg.Nothing) for i, k in enumerate(dep_keys)}

    @dg.graph_asset(key=key(CURATED, f"clean_{spec.name}"), group_name=CURATED, ins=ins, kinds={"parquet"},
                    code_version=code_version(CURATION_CODE, _clean_config(recipe, spec)),
                    metadata=execution_metadata(recipe, spec),
                    description=f"{spec.name}: read in {spec.shards} shards ({SHARDING}); per shard canonical rows "
                                f"with quarantine and rows sharing a {recipe.curation.decontam.ngram}-gram with any "
                                "benchmark removed; exact and MinHash near-duplicates found per key partition and "
                                "resolved by connected components (earliest row kept); rows assembled in source "
                                "order (same rows and data version as unsharded).")
    def clean(**deps: Any) -> Any:
        shards = {f"shard_{k}": op(**deps) for k, op in enumerate(shard_ops)}
        removed = cluster(**{f"part_{j}": op(**shards) for j, op in enumerate(dedup_ops)})
        return assemble(removed=removed, **shards)

    return clean
