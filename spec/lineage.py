"""The lineage record: one file, `lineage.json`, beside every dataset, checkpoint and eval.

Every record has the same five keys, written by `write_record` and nothing else:

    asset         the asset name (e.g. `math_rl_prompts`, `math_rl`, `eval_math_rl`)
    data_version  THE version of this output (a content hash for datasets, an input hash for
                  checkpoints and evals); also the folder name and Dagster's DataVersion
    path          where the output lives (under the home: `${CASCADE_HOME}/...`, spec.paths)
    code_version  the library code (and config slice) that produced it
    inputs        [{asset, data_version, path}] of everything it was made from

Every path under `$CASCADE_HOME`, in the five keys and in the details, is stored relative to
it (`${CASCADE_HOME}/...`), so a moved or copied home still resolves; `lineage_tree` gives
paths resolved against the current home.

plus details that depend on what it records (row counts and drop reasons of a dataset; the
trainer's config, rewards, seed, library versions and metrics summary of a checkpoint), and
`files`, added by `write_record` itself: `{relative name: {size, digest}}` of every data file in
the folder (`file_manifest`), so a reader can tell whether the folder still holds what the
record describes (spec.lineage_verify; docs/lineage.md).
Walking `inputs` from record to record rebuilds the whole tree back to the raw source files
with no Dagster process running (`lineage_tree`, `render_tree`; `cascade lineage` prints it).
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from spec.hashing import file_digest
from spec.paths import portable, portable_path, resolve_home_path

LINEAGE_FILE = "lineage.json"
RECORD_KEYS = ("asset", "data_version", "path", "code_version", "inputs")
FILES_KEY = "files"
UNSIGNED_NAMES = frozenset({LINEAGE_FILE, "README.md", "checkpoints"})
"""Top-level names `files` leaves out: the record itself, the model card (rewritten when the
checkpoint is evaluated, after its record) and a trainer's resume state (deleted right after the
record is written). Hidden names (temporary files, set-aside folders) are left out too."""


def input_ref(asset: str, data_version: str, path: str | Path | None) -> dict[str, Any]:
    """One entry of `inputs`."""
    return {"asset": asset, "data_version": str(data_version), "path": None if path is None else portable_path(path)}


def make_record(asset: str, data_version: str, path: str | Path, code_version: str | None,
                inputs: Sequence[dict[str, Any]], **details: Any) -> dict[str, Any]:
    """A lineage record: the five common keys, then `details`, then `created_at`."""
    for i, item in enumerate(inputs):
        if "asset" not in item or "data_version" not in item:
            raise ValueError(f"{asset}: input {i} needs `asset` and `data_version`: {item}")
    clash = set(details) & {*RECORD_KEYS, FILES_KEY, "created_at"}
    if clash:
        raise ValueError(f"{asset}: details may not override {sorted(clash)}")
    return portable({"asset": asset, "data_version": str(data_version), "path": str(path), "code_version": code_version,
                     "inputs": [dict(i) for i in inputs], **details,
                     "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})


def data_files(folder: str | Path) -> list[Path]:
    """The data files of an output folder, sorted: every file below it except UNSIGNED_NAMES at
    the top and anything under a hidden name."""
    folder = Path(folder)
    out = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if rel.parts[0] in UNSIGNED_NAMES or any(part.startswith(".") for part in rel.parts):
            continue
        if path.is_file():
            out.append(path)
    return sorted(out)


def file_manifest(folder: str | Path) -> dict[str, dict[str, Any]]:
    """`{relative name: {size, digest}}` of the folder's data files (what `files` records)."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "digest": file_digest(p)}
            for p in data_files(folder)}


def write_record(folder: str | Path, record: dict[str, Any]) -> Path:
    """Write `record` as `<folder>/lineage.json` atomically (readers never see half a file), with
    `files` set to the folder's `file_manifest`: write the record after the data it describes.
    `record` gains that `files` entry in place, so the caller's copy is the one on disk."""
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise ValueError(f"a lineage record needs {missing}")
    record[FILES_KEY] = file_manifest(folder)
    target = Path(folder) / LINEAGE_FILE
    tmp = target.with_name(f".{LINEAGE_FILE}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False, default=str))
    os.replace(tmp, target)
    return target


def read_record(path: str | Path) -> dict[str, Any] | None:
    """The record of a folder (or of the folder holding a file); None when it has none."""
    p = Path(path)
    p = p.parent if p.is_file() else p
    target = p / LINEAGE_FILE
    return json.loads(target.read_text()) if target.is_file() else None


def lineage_tree(ref: dict[str, Any], _seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """{asset, data_version, path, code_version, inputs: [same shape]} from a record's folder (paths resolved)."""
    try:
        record = (read_record(resolve_home_path(ref["path"])) if ref.get("path") else None) or {}
    except ValueError:  # an unreadable record: shown as the reference has it (verification names it)
        record = {}
    path = record.get("path") or ref.get("path")
    node = {
        "asset": record.get("asset") or ref.get("asset"),
        "data_version": str(record.get("data_version") or ref.get("data_version")),
        "path": str(resolve_home_path(path)) if path else str(path),
        "code_version": record.get("code_version", ref.get("code_version")),
        "inputs": [],
    }
    if record.get("data_version") is not None and ref.get("data_version") is not None \
            and str(ref["data_version"]) != str(record["data_version"]):  # who points here disagrees with it
        node["problems"] = [f"{node['asset']}: referenced as data_version {ref['data_version']} but its "
                            f"{LINEAGE_FILE} says {record['data_version']}"]
    key = f"{node['path']}@{node['data_version']}"
    if key in _seen:  # defensive: lineage is a DAG, never recurse forever
        return node
    for inp in record.get("inputs", ref.get("inputs", [])) or []:
        node["inputs"].append(lineage_tree(inp, _seen | {key}))
    return node


def render_tree(node: dict[str, Any], prefix: str = "", last: bool = True, root: bool = True,
                _shown: set[str] | None = None) -> list[str]:
    """Human-readable tree, one line per node: name, version, path. A subtree that was
    already printed (shared inputs such as benchmarks) is printed once, then referenced. A node
    with `problems` (spec.lineage_verify.annotate_tree) is marked UNVERIFIED, one `!!` line each."""
    shown = set() if _shown is None else _shown
    ident = f"{node['asset']}@{node['data_version']}"
    repeat = ident in shown and node["inputs"]
    label = f"{node['asset']}  [{str(node['data_version'])[:12]}]  {node['path']}" + ("  (inputs shown above)" if repeat else "")
    label += "  UNVERIFIED" if node.get("problems") else ""
    lines = [label if root else f"{prefix}{'└── ' if last else '├── '}{label}"]
    child_prefix = "" if root else prefix + ("    " if last else "│   ")
    lines += [f"{child_prefix}{'│   ' if node['inputs'] and not repeat else '    '}!! {p}" for p in node.get("problems", [])]
    if repeat:
        return lines
    shown.add(ident)
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
