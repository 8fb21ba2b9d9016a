"""`cascade run --select`: Dagster's selection syntax, upstream checked before anything runs.

Each comma-separated item is an asset name (its full key `curated/clean_a` or its last component
`clean_a`) with Dagster's graph operators around it: `+clean_a` is the asset and all its
ancestors, `clean_a+` the asset and all its descendants, `1+clean_a` one layer up, `2+x+1`
and so on. The name is resolved to its key and the item handed to Dagster's own parser
(`AssetSelection.from_string`, e.g. `+key:"curated/clean_a"`); an item already in Dagster's
syntax (`group:sources`, `key:"sources/raw_a" or kind:parquet`) is passed as it is.

Decided: a selection whose upstream was never materialized fails at once, before anything is
observed or run, naming each missing asset and the `--select` that adds them (the `+` form),
instead of running and failing on the first step that reads it. And only the raw files the
selection reads are observed (hashed, and written first when they are built-in sample data),
so a selected run writes no sample file it does not read.
"""

from __future__ import annotations

import re
from typing import Any, Callable

ITEM = re.compile(r"^(\d*\+)?([^\s+:\"()]+?)(\+\d*)?$")
"""An asset name with Dagster's upstream (`+`, `2+`) and downstream (`+`, `+2`) operators."""


def parse_selection(graph: Any, text: str, resolve: Callable[[str], Any]) -> list[Any]:
    """The materializable asset keys `text` selects, sorted; `resolve(name)` gives a name's key
    (unknown or ambiguous names raise ValueError, as do items Dagster cannot parse)."""
    import dagster as dg

    keys: set[Any] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = ITEM.match(item)
        if match:
            up, name, down = match.groups()
            expr = f'{up or ""}key:"{resolve(name).to_user_string()}"{down or ""}'
        else:
            expr = item
        try:
            keys |= dg.AssetSelection.from_string(expr).resolve(graph)
        except Exception as err:  # noqa: BLE001 - Dagster's parse errors have several types
            raise ValueError(f"--select {item!r}: not an asset name or a Dagster selection ({err})") from None
    chosen = sorted(keys & set(graph.materializable_asset_keys), key=lambda k: k.to_user_string())
    if not chosen:
        raise ValueError(f"--select {text}: selects no asset of the recipe")
    return chosen


def missing_upstream(graph: Any, instance: Any, selection: list[Any]) -> list[Any]:
    """The assets the selection reads that are outside it and were never materialized."""
    chosen = set(selection)
    parents = {p for k in chosen for p in graph.get(k).parent_keys
               if p not in chosen and graph.get(p).is_materializable}
    return sorted((p for p in parents if instance.get_latest_materialization_event(p) is None),
                  key=lambda k: k.to_user_string())


def check_upstream(graph: Any, instance: Any, selection: list[Any], text: str) -> None:
    """ValueError naming what to add when the selection's upstream was never materialized."""
    missing = missing_upstream(graph, instance, selection)
    if not missing:
        return
    names = ", ".join(k.to_user_string() for k in missing)
    wanted = ",".join(f"+{k.path[-1]}" for k in selection if set(graph.get(k).parent_keys) & set(missing))
    raise ValueError(f"--select {text}: the selection reads {names}, never materialized; add "
                     f"{'it' if len(missing) == 1 else 'them'} (--select {text},{','.join(k.path[-1] for k in missing)}) "
                     f"or select with everything upstream (--select {wanted}). Nothing was run")


def observed_files(graph: Any, selection: list[Any]) -> list[Any]:
    """The observable raw files (sources/file_*) that the selected assets read."""
    return sorted({p for k in selection for p in graph.get(k).parent_keys if graph.get(p).is_observable},
                  key=lambda k: k.to_user_string())
