"""Source and benchmark assets: raw files observed by content hash, mapped onto canonical
schemas (with quarantine), and benchmark text for decontamination and evaluation.

A source file is an observable source asset whose data version is the file's content
hash, so replacing the file (or pointing the recipe elsewhere) is what makes everything
downstream stale; nothing else has to be told.

A raw source (and a benchmark file) records the version of the bytes its rows were parsed
from: the file is hashed before and after the parse (spec.consistent_read.read_consistent), and
a file replaced or rewritten meanwhile fails the asset ("source X changed while it was read
(...); rerun when it is stable") instead of recording a version of other bytes; nothing is
written for such a read.

A raw source's metadata and lineage record show how it was read (the row layout and reader,
given or detected, and the valid rows per layout of an `auto` file that mixes layouts) and,
next to the row counts, the first quarantined rows with their reasons, so a source in an
unexpected layout is visible at a glance; one that keeps fewer than `min_rows` rows fails its
blocking `rows_kept` check (assets.checks) instead of succeeding empty.
"""


import warnings
from pathlib import Path
from typing import Any, Callable

import dagster as dg

from assets.common import BENCHMARKS, SOURCES, WorkTimer, dataset_metadata, key, preview_markdown
from assets.store import CascadeStore
from spec.consistent_read import FileChangedError, read_consistent
from spec.hashing import code_version, file_digest
from spec.data import BenchmarkSpec, SourceSpec
from spec.paths import portable_path
from spec.recipe import Recipe

CURATION_CODE = ("curation",)
warnings.filterwarnings("ignore", message=".*observable_source_asset.*")


def ensure_file(recipe: Recipe, spec: SourceSpec | BenchmarkSpec) -> Path:
    """Resolve a spec's path, writing the built-in sample data first when it is missing."""
    path = recipe.resolve(spec.path)
    if not path.exists() and spec.generate:
        from curation.samples import generate

        generate(spec.generate, path, seed=recipe.seed, replace=False)  # concurrent `status` calls: first one wins
    if not path.exists():
        raise dg.Failure(f"{spec.name}: file not found: {path}")
    return path


def _file_asset(recipe: Recipe, spec: SourceSpec | BenchmarkSpec, name: str) -> dg.SourceAsset:
    @dg.observable_source_asset(
        key=key(SOURCES, name),
        group_name=SOURCES,
        description=f"Raw file of {spec.name!r}, versioned by content hash ({spec.path}).",
    )
    def _observe(context) -> dg.ObserveResult:
        path = ensure_file(recipe, spec)
        try:
            digest = file_digest(path)
        except FileChangedError as err:
            raise dg.Failure(f"{spec.name}: {err}; rerun when it is stable") from None
        return dg.ObserveResult(
            data_version=dg.DataVersion(digest),
            metadata={"path": dg.MetadataValue.path(portable_path(path)), "data_version": digest},
        )

    return _observe


def file_asset_name(spec: SourceSpec | BenchmarkSpec) -> str:
    return f"file_{spec.name}" if isinstance(spec, SourceSpec) else f"file_bench_{spec.name}"


def _raw_asset(recipe: Recipe, spec: SourceSpec, timer: WorkTimer) -> dg.AssetsDefinition:
    file_key = key(SOURCES, file_asset_name(spec))
    config = spec.model_dump(mode="json")

    @dg.asset(
        key=key(SOURCES, f"raw_{spec.name}"),
        deps=[file_key],
        group_name=SOURCES,
        code_version=code_version(CURATION_CODE, config),
        description=f"{spec.name}: rows mapped onto the canonical `{spec.domain}` schema; invalid rows quarantined with a reason.",
        kinds={"parquet"},
    )
    def _raw(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from curation.sources import load_source

        path = ensure_file(recipe, spec)
        with timer.measure(context.asset_key.to_user_string()):
            result, digest = read_versioned(f"source {spec.name!r}", path, lambda: load_source(
                path, spec.format, spec.domain, spec.name,
                columns=spec.columns or None, split=spec.split, limit=spec.limit, reader=spec.reader,
            ))
            out = store.write_dataset(
                result.table, f"raw_{spec.name}",
                rows_in=result.rows_in, dropped=result.dropped,
                inputs=[{"asset": file_asset_name(spec), "data_version": digest, "path": str(path)}],
                code_version=code_version(CURATION_CODE, config), config=config,
                extra_files={"quarantine.parquet": result.quarantine},
                details={"format": result.format, "reader": result.reader, "layouts": result.layouts},
            )
        return _result(out, result.table, _load_metadata(result))

    return _raw


def read_versioned(what: str, path: Path, load: Callable[[], Any]) -> tuple[Any, str]:
    """`load()` and the digest of the bytes it parsed; the asset fails if the file changed meanwhile."""
    try:
        return read_consistent(path, load, f"{what} ({path})")
    except FileChangedError as err:
        raise dg.Failure(str(err)) from None


QUARANTINE_EXAMPLES = 5
RAW_CHARS = 300


def _load_metadata(result: Any) -> dict[str, Any]:
    """Layout and reader used, and the first quarantined rows (reason + raw text, cut)."""
    examples = result.quarantine.slice(0, QUARANTINE_EXAMPLES).select(["line", "reason", "raw"]).to_pylist()
    return {
        "format": result.format,
        "reader": result.reader,
        "layouts": dg.MetadataValue.json(result.layouts),
        "quarantine_examples": dg.MetadataValue.md(
            preview_markdown(examples, limit=QUARANTINE_EXAMPLES, width=RAW_CHARS) if examples else "_none_"),
    }


def _benchmark_asset(recipe: Recipe, spec: BenchmarkSpec, timer: WorkTimer) -> dg.AssetsDefinition:
    config = spec.model_dump(mode="json")
    deps = [key(SOURCES, file_asset_name(spec))] if spec.path else []

    @dg.asset(
        key=key(BENCHMARKS, f"bench_{spec.name}"),
        deps=deps,
        group_name=BENCHMARKS,
        code_version=code_version(CURATION_CODE, config),
        description=(
            f"Benchmark {spec.name!r}: decontamination target"
            + (f" and held-out `{spec.eval_domain}` eval set." if spec.eval_domain else ".")
        ),
        kinds={"parquet"},
    )
    def _bench(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        from curation.sources import load_benchmark

        path = ensure_file(recipe, spec) if spec.path else None
        with timer.measure(context.asset_key.to_user_string()):
            def load() -> Any:
                return load_benchmark(builtin=spec.builtin, path=path, domain=spec.domain, name=spec.name)

            if path is None:
                table, inputs = load(), []
            else:
                table, digest = read_versioned(f"benchmark {spec.name!r}", path, load)
                inputs = [{"asset": file_asset_name(spec), "data_version": digest, "path": str(path)}]
            out = store.write_dataset(
                table, f"bench_{spec.name}", rows_in=table.num_rows, dropped={},
                inputs=inputs, code_version=code_version(CURATION_CODE, config), config=config,
            )
        return _result(out, table)

    return _bench


def _result(out, table, extra: dict | None = None) -> dg.MaterializeResult:
    return dg.MaterializeResult(
        data_version=dg.DataVersion(out.data_version),
        metadata={**dataset_metadata(out.record, table.slice(0, 5).to_pylist()), **(extra or {})},
    )


def build_source_assets(recipe: Recipe, timer: WorkTimer) -> list:
    """File observers, raw canonical sources and benchmarks for every recipe entry."""
    defs: list = []
    for spec in recipe.sources:  # a sharded source reads its file in its shard steps (assets.shards)
        defs += [_file_asset(recipe, spec, file_asset_name(spec))] + ([_raw_asset(recipe, spec, timer)] if spec.shards == 1 else [])
    for bench in recipe.benchmarks:
        if bench.path:
            defs.append(_file_asset(recipe, bench, file_asset_name(bench)))
        defs.append(_benchmark_asset(recipe, bench, timer))
    return defs
