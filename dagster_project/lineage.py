"""Lineage trees from the records written beside every dataset and checkpoint.

Every dataset folder has `manifest.json` and every checkpoint/eval folder `lineage.json`, each
naming its inputs by {asset, data_version, path}. Walking those files rebuilds the full tree
back to the raw source files with no Dagster process running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD_FILES = ("lineage.json", "manifest.json")


def read_record(path: str | Path) -> dict[str, Any] | None:
    p = Path(path)
    p = p.parent if p.is_file() else p
    for name in RECORD_FILES:
        if (p / name).is_file():
            record = json.loads((p / name).read_text())
            # Trainer records nest the asset-level keys under "lineage" (config.lineage).
            return {**record, **record.get("lineage", {})} if isinstance(record.get("lineage"), dict) else record
    return None


def lineage_tree(ref: dict[str, Any], _seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """{asset, data_version, path, code_version, inputs: [same shape]} for one record."""
    record = read_record(ref["path"]) if ref.get("path") else None
    record = record or {}
    node = {
        "asset": record.get("asset") or ref.get("asset"),
        "data_version": str(record.get("data_version") or ref.get("data_version")),
        "path": str(record.get("path") or ref.get("path")),
        "code_version": record.get("code_version", ref.get("code_version")),
        "inputs": [],
    }
    key = f"{node['path']}@{node['data_version']}"
    if key in _seen:  # defensive: lineage is a DAG, never recurse forever
        return node
    for inp in record.get("inputs", ref.get("inputs", [])) or []:
        node["inputs"].append(lineage_tree(inp, _seen | {key}))
    return node


def render_tree(node: dict[str, Any], prefix: str = "", last: bool = True, root: bool = True,
                _shown: set[str] | None = None) -> list[str]:
    """Human-readable tree, one line per node: name, version, path. A subtree that was
    already printed (shared inputs such as benchmarks) is printed once, then referenced."""
    shown = set() if _shown is None else _shown
    ident = f"{node['asset']}@{node['data_version']}"
    repeat = ident in shown and node["inputs"]
    label = f"{node['asset']}  [{str(node['data_version'])[:12]}]  {node['path']}" + ("  (inputs shown above)" if repeat else "")
    lines = [label if root else f"{prefix}{'└── ' if last else '├── '}{label}"]
    if repeat:
        return lines
    shown.add(ident)
    child_prefix = "" if root else prefix + ("    " if last else "│   ")
    for i, child in enumerate(node["inputs"]):
        lines += render_tree(child, child_prefix, i == len(node["inputs"]) - 1, root=False, _shown=shown)
    return lines


def tree_diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(asset, version_a, version_b) for every node whose version differs, matched by asset name."""

    def flatten(n: dict[str, Any], out: dict[str, str]) -> dict[str, str]:
        out.setdefault(n["asset"], n["data_version"])
        for c in n["inputs"]:
            flatten(c, out)
        return out

    fa, fb = flatten(a, {}), flatten(b, {})
    return sorted((k, fa.get(k, ""), fb.get(k, "")) for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
