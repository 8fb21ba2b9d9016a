"""Shared wiring for the asset factories: where things live, how versions and upstream
paths are found, and how library results become Dagster metadata.

Every asset writes its output under `$CASCADE_HOME/<kind>/<asset>/<version>/` and reports
that folder as the `path` metadata of its materialization; a downstream asset reads the
upstream folder from the latest materialization in the Dagster instance, and the lineage
records (lineage.json, one writer: spec.lineage) carry the same paths so audits work without Dagster.
"""


import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import dagster as dg

from spec.paths import cascade_home, portable_path, resolve_home_path

# Asset key prefixes (groups in the UI).
SOURCES, BENCHMARKS, CURATED, CORPORA, CHECKPOINTS, EVALS = (
    "sources", "benchmarks", "curated", "corpora", "checkpoints", "evals",
)


def data_root() -> Path:
    return cascade_home() / "data"


def checkpoint_root() -> Path:
    return cascade_home() / "checkpoints"


def key(prefix: str, name: str) -> dg.AssetKey:
    return dg.AssetKey([prefix, name])


def latest_metadata(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> dict[str, Any]:
    """Metadata of an asset's latest materialization (or observation, for sources); `path` resolved
    against the current `$CASCADE_HOME`."""
    event = instance.get_latest_materialization_event(asset_key)
    if event is None or event.asset_materialization is None:
        raise dg.Failure(f"upstream asset {asset_key.to_user_string()} has not been materialized")
    meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    if isinstance(meta.get("path"), str):  # stored relative to the home (spec.paths.portable_path)
        meta["path"] = str(resolve_home_path(meta["path"]))
    return meta


def upstream_path(context: dg.AssetExecutionContext, asset_key: dg.AssetKey) -> Path:
    return Path(latest_metadata(context.instance, asset_key)["path"])


def upstream_ref(context: dg.AssetExecutionContext, asset_key: dg.AssetKey) -> dict[str, str]:
    """{asset, data_version, path} of an upstream asset, as recorded in lineage files."""
    meta = latest_metadata(context.instance, asset_key)
    return {"asset": asset_key.path[-1], "data_version": str(meta["data_version"]), "path": str(meta["path"])}


def preview_markdown(rows: list[dict[str, Any]], limit: int = 5, width: int = 60) -> str:
    """A small markdown table for the UI (first rows, long cells cut)."""
    if not rows:
        return "_empty_"
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows[:limit]:
        cells = []
        for c in cols:
            text = str(row.get(c, "")).replace("\n", " ").replace("|", "\\|")
            cells.append(text if len(text) <= width else text[: width - 1] + "…")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def dataset_metadata(record: dict[str, Any], preview: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Row counts, drop reasons and a preview: what a user checks first in the UI."""
    folder = resolve_home_path(record["path"])
    folder = folder.parent if folder.suffix == ".parquet" else folder
    meta: dict[str, Any] = {
        "path": dg.MetadataValue.path(portable_path(folder)),
        "data_version": record["data_version"],
        "rows_in": record["rows_in"],
        "rows_out": record["rows_out"],
        "dagster/row_count": record["rows_out"],
        "dropped": dg.MetadataValue.json(record.get("dropped", {})),
        "rows_dropped": sum(record.get("dropped", {}).values()),
        "inputs": dg.MetadataValue.json(record.get("inputs", [])),
    }
    if preview is not None:
        meta["preview"] = dg.MetadataValue.md(preview_markdown(preview))
    return meta


class WorkTimer:
    """Accumulates time spent inside library calls, to measure orchestration overhead, and
    prints one progress line per labelled piece of work."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextmanager
    def measure(self, label: str | None = None) -> Iterator[None]:
        start = time.perf_counter()
        if label:
            print(f"[cascade] {label} ...", file=sys.stderr, flush=True)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds += elapsed
            if label:
                print(f"[cascade] {label} done in {elapsed:.1f} s", file=sys.stderr, flush=True)
