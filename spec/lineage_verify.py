"""Records that verify themselves: does a `lineage.json` agree with the folder it sits in?

A record is trusted only after `verify_record` finds nothing wrong. It checks

- the layout: an output under `$CASCADE_HOME/<data|checkpoints|evals>/<asset>/<version>/` must
  have that `data_version` and that `asset` (evals: `eval_<stage>` in `evals/<stage>/`), and a
  `path` inside that folder;
- the data files against the record's `files` (`{name: {size, digest}}`, written by
  `spec.lineage.write_record`): none missing, none added, every size the same, and the digest of
  every file up to `QUICK_DIGEST_BYTES` (every file with `full=True`, which `cascade
  verify-home` uses). Bigger files are re-hashed only in full, so a same-size edit of a big
  model file is found by `cascade verify-home`, not on every read (docs/lineage.md says why).

Every problem is one line that names the output and both values, e.g. `checkpoints/math_rl:
lineage.json says data_version abc but its folder is def`. Readers (the assets' reuse paths,
`cascade status`, `lineage`, `report`, `audit`) treat an output with problems as unusable;
`set_aside` moves it out of the way (never deletes it) so it is made again.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from spec.hashing import file_digest
from spec.lineage import FILES_KEY, LINEAGE_FILE, RECORD_KEYS, data_files
from spec.paths import HOME_TOKEN, cascade_home, resolve_home_path

QUICK_DIGEST_BYTES = 8 << 20
"""Files up to this size are re-hashed on every read; bigger ones only by `full` verification."""
OUTPUT_ROOTS = ("data", "checkpoints", "evals")
"""The folders of `$CASCADE_HOME` that hold `<asset>/<version>/` outputs."""


def _folder(path: str | Path) -> Path:
    """The output folder of a path: itself, or the folder holding a file (`.../data.parquet`, also
    when it is gone: version folders have no suffix)."""
    p = Path(path)
    return p.parent if p.is_file() or (p.suffix and not p.exists()) else p


def _layout(folder: Path) -> tuple[str, str, str] | None:
    """(root, asset path, version) of a folder in the home's output layout, None elsewhere."""
    home = Path(os.path.realpath(cascade_home()))
    real = Path(os.path.realpath(folder))
    for root in OUTPUT_ROOTS:
        base = home / root
        if real.is_relative_to(base) and len(real.relative_to(base).parts) >= 2:
            rel = real.relative_to(base)
            return root, rel.parent.as_posix(), rel.name
    return None


def output_label(folder: str | Path) -> str:
    """How problems name an output: `checkpoints/math_rl` in the home's layout, else its folder."""
    folder = _folder(folder)
    where = _layout(folder)
    return f"{where[0]}/{where[1]}" if where else str(folder)


def load_record(folder: str | Path) -> tuple[dict[str, Any] | None, list[str]]:
    """(record, problems reading it): (None, []) when the folder has no record."""
    folder = _folder(folder)
    target = folder / LINEAGE_FILE
    if not target.is_file():
        return None, []
    try:
        record = json.loads(target.read_text())
    except (OSError, ValueError) as err:
        return None, [f"{output_label(folder)}: {LINEAGE_FILE} cannot be read ({err})"]
    if not isinstance(record, dict):
        return None, [f"{output_label(folder)}: {LINEAGE_FILE} is not a JSON object"]
    return record, []


def _check_layout(folder: Path, record: dict[str, Any], label: str) -> list[str]:
    where = _layout(folder)
    if where is None:
        return []
    root, asset_path, version = where
    problems = []
    if str(record.get("data_version")) != version:
        problems.append(f"{label}: {LINEAGE_FILE} says data_version {record.get('data_version')} "
                        f"but its folder is {version}")
    names = {asset_path} | ({f"eval_{asset_path}"} if root == "evals" else set())
    if record.get("asset") not in names:
        problems.append(f"{label}: {LINEAGE_FILE} says asset {record.get('asset')} but its folder is {asset_path}")
    path = str(record.get("path") or "")
    if path.startswith(HOME_TOKEN):  # a path in the home must point into this folder
        real, here = Path(os.path.realpath(resolve_home_path(path))), Path(os.path.realpath(folder))
        if real != here and real.parent != here:
            problems.append(f"{label}: {LINEAGE_FILE} says path {path} but it lies in {here}")
    return problems


def _check_files(folder: Path, recorded: Any, label: str, full: bool) -> list[str]:
    if not isinstance(recorded, dict):
        return [f"{label}: {LINEAGE_FILE} has a malformed `{FILES_KEY}` entry"]
    problems = []
    present = {p.relative_to(folder).as_posix(): p for p in data_files(folder)}
    for name, entry in sorted(recorded.items()):
        size, digest = (entry.get("size"), entry.get("digest")) if isinstance(entry, dict) else (None, None)
        path = present.get(name)
        if path is None:
            problems.append(f"{label}: data file {name} is missing ({LINEAGE_FILE} lists it: {size} bytes, "
                            f"digest {digest})")
            continue
        actual = path.stat().st_size
        if actual != size:
            problems.append(f"{label}: data file {name} is {actual} bytes but {LINEAGE_FILE} says {size}")
        elif full or actual <= QUICK_DIGEST_BYTES:
            now = file_digest(path)
            if now != digest:
                problems.append(f"{label}: data file {name} has digest {now} but {LINEAGE_FILE} says {digest}")
    for name in sorted(set(present) - set(recorded)):
        problems.append(f"{label}: data file {name} is not listed in {LINEAGE_FILE} (added after it was written)")
    return problems


def verify_record(folder: str | Path, *, full: bool = False) -> list[str]:
    """Every way the record of `folder` (or of the folder holding a file) disagrees with the
    folder; [] when it agrees. A folder without a record is one problem. `full`: re-hash every
    data file, however big (`cascade verify-home`)."""
    folder = _folder(folder)
    label = output_label(folder)
    record, problems = load_record(folder)
    if record is None:
        return problems or [f"{label}: no {LINEAGE_FILE} in {folder}"]
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        problems.append(f"{label}: {LINEAGE_FILE} lacks {missing}")
    problems += _check_layout(folder, record, label)
    if FILES_KEY in record:  # records written before `files` existed are checked by layout only
        problems += _check_files(folder, record[FILES_KEY], label, full)
    return problems


def read_verified_record(folder: str | Path, *, full: bool = False) -> tuple[dict[str, Any] | None, list[str]]:
    """(record, problems): the record of `folder` and `verify_record`'s findings; (None, [...]) when
    it has none or it cannot be read. Use the record only when problems is empty."""
    record, problems = load_record(folder)
    if record is None:
        return None, problems or verify_record(folder)
    return record, verify_record(folder, full=full)


def set_aside(folder: str | Path, prefix: str = ".unverified-") -> Path:
    """Move an unusable output folder out of the way, beside itself under a hidden name
    (`<prefix><version>-<random>`, skipped by every reader and by `files`), so the asset writes
    it again; nothing is deleted here (assets.publish uses its `.tmp-` prefix for folders the
    next run may remove). Returns the new place."""
    folder = _folder(folder)
    target = folder.with_name(f"{prefix}{folder.name}-{uuid.uuid4().hex[:8]}")
    os.replace(folder, target)
    return target


def annotate_tree(node: dict[str, Any]) -> dict[str, Any]:
    """A `spec.lineage.lineage_tree` with `problems` added to every node whose folder has a record
    that does not verify (nodes without a record, such as raw source files, are left as they are)."""
    path = node.get("path")
    problems: list[str] = []
    if path and path != "None" and Path(path).exists():
        record, problems = load_record(path)
        if record is not None:
            problems = verify_record(path)
    elif path and path != "None" and _layout(Path(path)) is not None:
        problems = [f"{output_label(path)}: its output {path} is gone"]
    if problems:
        node["problems"] = [*node.get("problems", []), *problems]
    for child in node.get("inputs", []):
        annotate_tree(child)
    return node


def tree_problems(node: dict[str, Any]) -> list[str]:
    """Every problem in an annotated tree, each once, in tree order."""
    found = list(node.get("problems", []))
    for child in node.get("inputs", []):
        found += [p for p in tree_problems(child) if p not in found]
    return found
