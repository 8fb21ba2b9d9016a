"""Row accounting in the terminal: what happened to the rows of every source and corpus.

What: one row per recipe source (rows in, kept, quarantined, decontaminated, deduplicated,
filtered, the top reasons with counts, and the row layout and reader that read it) and one per
training corpus, printed at the end of `cascade run` (`accounting_table`); the same numbers per
asset in `cascade status --json` and per node in `cascade lineage --json` (`record_rows`,
`add_rows`).

Why here and from the records: the numbers are the ones each asset wrote into its lineage
record (assets.common.accounting reads `rows_in`, `rows_out`, `dropped`, `format`, `reader`),
never recounted, so the terminal, the JSON and the UI metadata cannot disagree. A source's row
joins its raw read (`raw_<source>`, or the shard reads of a sharded source) with its curated
table (`clean_<source>`) when that table was built from that very read; otherwise the curated
columns are left empty (a run that stopped at the raw source).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from assets.common import (ACCOUNTING_COLUMNS as COLUMNS, CORPORA, CURATED, DECONTAM_PREFIX, SOURCES, accounting, key,
                           latest_metadata, top_reasons)
from spec.lineage import read_record
from spec.paths import resolve_home_path

Record = dict[str, Any]


def record_rows(path: str | Path | None) -> dict[str, Any] | None:
    """The accounting (assets.common.accounting) of the dataset record at `path`; None when there
    is no readable dataset record there (a checkpoint, an eval, a raw file)."""
    if not path:
        return None
    try:
        record = read_record(resolve_home_path(str(path)))
    except (OSError, ValueError):
        return None
    return accounting(record) if record else None


def add_rows(node: dict[str, Any]) -> dict[str, Any]:
    """A `lineage_tree` node (and its inputs, in place) with `rows` on every dataset node."""
    rows = record_rows(node.get("path"))
    if rows is not None:
        node["rows"] = rows
    for child in node.get("inputs", []):
        add_rows(child)
    return node


def _layout(parts: list[Record]) -> str:
    layouts: dict[str, int] = {}
    for part in parts:
        for name, count in (part.get("layouts") or {}).items():
            layouts[name] = layouts.get(name, 0) + count
    if len(layouts) > 1:
        return "+".join(sorted(layouts, key=lambda name: -layouts[name]))
    return str(parts[0].get("format", "-")) if parts else "-"


def source_row(name: str, raw: Record | None, clean: Record | None) -> dict[str, Any] | None:
    """One source's row from its raw record (None when sharded: the clean record's shard inputs are
    read instead) and its clean record; None when neither exists."""
    loads = [raw] if raw else [r for r in (_input_record(i) for i in (clean or {}).get("inputs", [])
                                         if "_shards/" in str(i.get("asset", ""))) if r]
    if clean and raw and not any(i.get("asset") == raw["asset"] and str(i.get("data_version")) == str(raw["data_version"])
                                 for i in clean.get("inputs", [])):
        clean = None  # built from an earlier read of the source: not this read's accounting
    if not loads and not clean:
        return None
    reads = [accounting(r) or {} for r in loads]
    cleaned = accounting(clean) if clean else None
    reasons: dict[str, int] = {}
    for part in [*reads, cleaned or {}]:
        for reason, count in part.get("dropped", {}).items():
            if part is cleaned or not reason.startswith(DECONTAM_PREFIX):  # shard reads count it again
                reasons[reason] = reasons.get(reason, 0) + count
    row: dict[str, Any] = {"kind": "source", "name": name, "layout": _layout(loads),
                           "reader": str(loads[0].get("reader", "-")) if loads else "-"}
    row["rows_in"] = sum(r.get("rows_in", 0) for r in reads) if reads else cleaned["rows_in"]  # type: ignore[index]
    row["quarantined"] = sum(r.get("quarantined", 0) for r in reads)
    for column in ("decontaminated", "deduplicated", "filtered"):
        row[column] = cleaned[column] if cleaned else None
    row["kept"] = cleaned["kept"] if cleaned else sum(r.get("kept", 0) for r in reads)
    row["top_reasons"] = top_reasons(reasons)
    return row


def corpus_row(name: str, record: Record | None) -> dict[str, Any] | None:
    """One corpus's row from its record; None when it has none."""
    rows = accounting(record) if record else None
    if rows is None:
        return None
    return {"kind": "corpus", "name": name, "layout": "-", "reader": "-",
            **{c: rows[c] for c, _ in COLUMNS}, "quarantined": None, "top_reasons": rows["top_reasons"]}


def _input_record(ref: dict[str, Any]) -> Record | None:
    try:
        return read_record(resolve_home_path(ref["path"])) if ref.get("path") else None
    except (OSError, ValueError):
        return None


def recipe_rows(recipe: Any, record_of: Callable[[Any], Record | None]) -> list[dict[str, Any]]:
    """The rows of every source and corpus of `recipe`, `record_of(asset key)` giving the latest record."""
    rows = [source_row(s.name, record_of(key(SOURCES, f"raw_{s.name}")) if s.shards == 1 else None,
                       record_of(key(CURATED, f"clean_{s.name}"))) for s in recipe.sources]
    corpora = [f"{s.name}_data" for s in recipe.sft_stages] + (
        [f"{recipe.reward_model.name}_data"] if recipe.reward_model else []) + [f"{s.name}_prompts" for s in recipe.rl_stages]
    rows += [corpus_row(name, record_of(key(CORPORA, name))) for name in corpora]
    return [r for r in rows if r is not None]


def instance_records(instance: Any) -> Callable[[Any], Record | None]:
    """`record_of` for `recipe_rows`: the record of an asset's latest materialization, or None."""
    def record_of(asset_key: Any) -> Record | None:
        try:
            return read_record(latest_metadata(instance, asset_key)["path"])
        except Exception:  # noqa: BLE001 - not materialized, or its folder is gone: no row
            return None

    return record_of


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table (a missing number is `-`), one line per source and corpus."""
    header = ["", "layout", "reader", *(label for _, label in COLUMNS), "top reasons"]
    lines = [[f"{r['kind']} {r['name']}", r["layout"], r["reader"],
              *("-" if r.get(c) is None else str(r[c]) for c, _ in COLUMNS),
              ", ".join(r["top_reasons"]) or "-"] for r in rows]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    numeric = range(3, 3 + len(COLUMNS))

    def render(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join(render(cells) for cells in [header, *lines])


def accounting_table(recipe: Any, instance: Any) -> str:
    """The table `cascade run` prints at its end ("" when no source or corpus has a record yet)."""
    rows = recipe_rows(recipe, instance_records(instance))
    return "Rows (from each output's lineage.json):\n" + format_table(rows) if rows else ""
