"""Shared wiring for the asset factories: asset keys, how an output's Dagster metadata is read
and verified, and how library results become Dagster metadata.

Every asset writes its output under `<home>/<data|checkpoints|evals>/<asset>/<version>/` and
reports that folder as the `path` metadata of its materialization. Asset bodies reach the home
and their upstream outputs through the store resource (assets.store.CascadeStore), which reads
that metadata here (`latest_metadata`) and hands a folder on only after its lineage record
verifies (`output_problems`, spec.lineage_verify): a hand-edited or damaged output fails the step
that would read it, and `cascade status` (`materialization_problems`) shows it stale with the
cause. The lineage records (lineage.json, one writer: spec.lineage) carry the same paths, so
audits work without Dagster, and the row accounting (`accounting`: rows in, kept, quarantined,
decontaminated, deduplicated) that the terminal and the `rows_kept` check report, and that a
dataset's UI page shows as a table (`accounting_markdown`, under the terminal's labels). Every
path in the metadata, nested ones too, is `${CASCADE_HOME}`-relative (spec.paths.portable).
"""


import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import dagster as dg

from spec.lineage_verify import load_record, output_label, verify_record
from spec.paths import HOME_TOKEN, portable, portable_path, resolve_home_path

# Asset key prefixes (groups in the UI).
SOURCES, BENCHMARKS, CURATED, CORPORA, CHECKPOINTS, EVALS = (
    "sources", "benchmarks", "curated", "corpora", "checkpoints", "evals",
)


def key(prefix: str, name: str) -> dg.AssetKey:
    return dg.AssetKey([prefix, name])


def latest_metadata(instance: dg.DagsterInstance, asset_key: dg.AssetKey, home: Path | None = None) -> dict[str, Any]:
    """Metadata of an asset's latest materialization (or observation, for sources); `path` resolved
    against `home` (default: the current `$CASCADE_HOME`)."""
    event = instance.get_latest_materialization_event(asset_key)
    if event is None or event.asset_materialization is None:
        raise dg.Failure(f"upstream asset {asset_key.to_user_string()} has not been materialized")
    meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    path = meta.get("path")
    if isinstance(path, str):  # stored relative to the home (spec.paths.portable_path)
        in_home = home is not None and path.startswith(HOME_TOKEN)
        meta["path"] = str(home / path[len(HOME_TOKEN):].lstrip("/\\") if in_home else resolve_home_path(path))
    return meta


def output_problems(meta: dict[str, Any], dagster_version: str | None = None) -> list[str]:
    """What is wrong with the output a materialization's metadata (`latest_metadata`) points at:
    its folder is gone, or it has a record that does not verify (spec.lineage_verify), or, in the
    home's layout, that record's version is not the one Dagster stored (`dagster_version`, else the
    metadata's). [] for a sound output and for outputs that keep no record (raw source files)."""
    path = meta.get("path")
    if not isinstance(path, str) or not path:
        return []
    target = Path(path)
    if not target.exists():
        return [f"{output_label(target)}: its output {target} is gone"] if meta.get("data_version") else []
    folder = target if target.is_dir() else target.parent
    record, problems = load_record(folder)
    if record is None:
        return problems
    problems = verify_record(folder)
    label = output_label(folder)
    stored = dagster_version or meta.get("data_version")
    if not problems and label != str(folder) and stored is not None and str(stored) != str(record.get("data_version")):
        problems.append(f"{label}: Dagster's data version is {stored} but lineage.json says {record.get('data_version')}")
    return problems


def materialization_problems(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> list[str]:
    """`output_problems` of an asset's latest materialization ([] when it has none), against the
    data version Dagster stored with it."""
    event = instance.get_latest_materialization_event(asset_key)
    if event is None or event.asset_materialization is None:
        return []
    stored = (event.asset_materialization.tags or {}).get("dagster/data_version")
    return output_problems(latest_metadata(instance, asset_key), stored)


def verified(asset_key: dg.AssetKey, meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` of an upstream output, once `output_problems` finds nothing; else dg.Failure naming them."""
    problems = output_problems(meta)
    if problems:
        raise dg.Failure(f"upstream asset {asset_key.to_user_string()} is unusable until it is materialized again "
                         f"(`cascade run --stale`): " + "; ".join(problems))
    return meta


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
    """Row counts, drop reasons, the accounting table (`accounting_markdown`, the numbers the terminal
    prints) and a preview: what a user checks first in the UI. Paths are home-relative, nested ones too."""
    folder = resolve_home_path(record["path"])
    folder = folder.parent if folder.suffix == ".parquet" else folder
    rows = accounting(record)
    meta: dict[str, Any] = {
        "path": dg.MetadataValue.path(portable_path(folder)),
        "data_version": record["data_version"],
        **({"accounting": dg.MetadataValue.md(accounting_markdown(rows))} if rows is not None else {}),
        "rows_in": record["rows_in"],
        "rows_out": record["rows_out"],
        "dagster/row_count": record["rows_out"],
        "dropped": dg.MetadataValue.json(record.get("dropped", {})),
        "rows_dropped": sum(record.get("dropped", {}).values()),
        "inputs": dg.MetadataValue.json(portable(record.get("inputs", []))),
    }
    if preview is not None:
        meta["preview"] = dg.MetadataValue.md(preview_markdown(preview))
    return meta


DECONTAM_PREFIX = "contaminated:"
TOP_REASONS = 3


def ranked_reasons(dropped: dict[str, int]) -> list[tuple[str, int]]:
    """Drop reasons with their counts, most frequent first (ties: by name), none of count 0."""
    return [(reason, count) for reason, count in sorted(dropped.items(), key=lambda item: (-item[1], item[0])) if count]


def top_reasons(dropped: dict[str, int], n: int = TOP_REASONS) -> list[str]:
    """The `n` most frequent drop reasons as `reason ×count` (ranked_reasons), most first."""
    return [f"{reason} ×{count}" for reason, count in ranked_reasons(dropped)[:n]]


def is_load_record(record: dict[str, Any]) -> bool:
    """A record of rows read straight from a raw file (`raw_<source>`, or one shard
    `clean_<source>_shards/<k>`: an input is the `file_*` source asset): its drops other than
    decontamination are quarantined rows."""
    return any(str(i.get("asset", "")).startswith("file_") for i in record.get("inputs") or [])


def accounting(record: dict[str, Any]) -> dict[str, Any] | None:
    """A dataset record's row accounting, read from its lineage record (never recounted): rows in,
    kept, and its drops split into quarantined (rows a raw file's reader or layout rejected),
    decontaminated (`contaminated:<benchmark>`), deduplicated (`*duplicate*`) and filtered (the
    rest: a blend's or prompt set's own rules), the top reasons, and for a raw source the row
    layout and reader that read it. None for a record that is not a dataset's."""
    if record.get("kind") != "dataset" or "rows_in" not in record:
        return None
    dropped: dict[str, int] = dict(record.get("dropped") or {})
    parts = {"quarantined": 0, "decontaminated": 0, "deduplicated": 0, "filtered": 0}
    load = is_load_record(record)
    for reason, count in dropped.items():
        part = ("decontaminated" if reason.startswith(DECONTAM_PREFIX) else "deduplicated" if "duplicate" in reason
                else "quarantined" if load else "filtered")
        parts[part] += count
    out: dict[str, Any] = {"rows_in": record["rows_in"], "kept": record["rows_out"], **parts, "dropped": dropped,
                           "top_reasons": top_reasons(dropped)}
    out.update({k: record[k] for k in ("format", "reader", "layouts") if k in record})
    return out


ACCOUNTING_COLUMNS = (("rows_in", "in"), ("kept", "kept"), ("quarantined", "quarantined"),
                      ("decontaminated", "decontaminated"), ("deduplicated", "deduplicated"), ("filtered", "filtered"))
"""The accounting's numbers and their labels, in the order the terminal table and the UI show them."""


def accounting_markdown(rows: dict[str, Any]) -> str:
    """An `accounting` as the UI's markdown: one row per number under the terminal table's labels
    (ACCOUNTING_COLUMNS; a narrow table fits the UI's metadata column), the layout and reader of
    a raw read, and every drop reason with its count."""
    out = ["| rows | |", "|---|---:|", *(f"| {label} | {rows.get(c, 0)} |" for c, label in ACCOUNTING_COLUMNS)]
    read = [f"{what} `{rows[k]}`" for what, k in (("layout", "format"), ("reader", "reader")) if rows.get(k)]
    if len(rows.get("layouts") or {}) > 1:
        read.append("rows per layout: " + ", ".join(f"`{name}` {n}" for name, n in sorted(rows["layouts"].items())))
    if read:
        out += ["", "Read with " + "; ".join(read) + "."]
    ranked = ranked_reasons(rows["dropped"])
    if ranked:
        out += ["", "| dropped because | rows |", "|---|---:|"]
        out += [f"| `{reason}` | {count} |" for reason, count in ranked]
    return "\n".join(out)


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
        outcome = "failed after"  # "done" only for work that returned: a raise is not done
        try:
            yield
            outcome = "done in"
        finally:
            elapsed = time.perf_counter() - start
            self.seconds += elapsed
            if label:
                print(f"[cascade] {label} {outcome} {elapsed:.1f} s", file=sys.stderr, flush=True)
