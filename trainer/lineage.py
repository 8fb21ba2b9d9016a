"""lineage.json: what produced a checkpoint, enough to audit it without Dagster.

It names the parent checkpoint (and the parent's own lineage version, so the tree back to the
base model can be walked), the dataset version (the curation manifest's `data_version`, else a
content hash of the file), every reward with its code version, the full config and its hash,
seed, library versions and git commit. `version` hashes the inputs that determine the result.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

LINEAGE_FILE = "lineage.json"
_LIBRARIES = ("torch", "transformers", "tokenizers", "deepspeed", "trl", "accelerate", "pyarrow", "numpy")


def file_hash(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dataset_version(path: str | Path) -> dict[str, Any]:
    """{path, version, source}: manifest.json's data_version beside the parquet, else a file hash."""
    path = Path(path)
    manifest = path.parent / "manifest.json"
    if manifest.exists():
        try:
            version = json.loads(manifest.read_text()).get("data_version")
            if version:
                return {"path": str(path), "version": str(version), "source": "manifest"}
        except (OSError, json.JSONDecodeError):
            pass
    return {"path": str(path), "version": file_hash(path) if path.exists() else None, "source": "content_hash"}


def parent_record(policy: str | Path) -> dict[str, Any]:
    """The input checkpoint and, if it has one, its lineage version."""
    policy = Path(policy)
    record: dict[str, Any] = {"path": str(policy), "lineage_version": None, "kind": None}
    lineage = policy / LINEAGE_FILE
    if lineage.exists():
        data = json.loads(lineage.read_text())
        record.update(lineage_version=data.get("version"), kind=data.get("kind"))
    else:  # a base model: identify it by its weights
        weights = policy / "model.safetensors"
        record["weights_hash"] = file_hash(weights) if weights.exists() else None
    return record


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit() -> dict[str, Any]:
    """HEAD of the repository this code runs from, and whether the tree had local changes."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10)
        return {"commit": head.stdout.strip() or None, "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def build_lineage(config: Any, kind: str, rewards: list[dict[str, Any]] | None = None,
                  summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The lineage record of a stage run (`rewards`: [{name, version, weight, options}])."""
    parent = parent_record(config.policy)
    dataset = dataset_version(config.dataset)
    config_hash = config.config_hash()
    inputs = {"parent": parent.get("lineage_version") or parent.get("weights_hash"),
              "dataset": dataset["version"], "rewards": [(r["name"], r["version"]) for r in rewards or []],
              "config": config_hash}
    version = hashlib.blake2b(json.dumps(inputs, sort_keys=True).encode(), digest_size=16).hexdigest()
    return {
        "version": version,
        "kind": kind,
        "backend": config.backend,
        "parent": parent,
        "dataset": dataset,
        "rewards": rewards or [],
        "config": config.model_dump(mode="json"),
        "config_hash": config_hash,
        "seed": config.seed,
        "libraries": library_versions(),
        "git": git_commit(),
        "lineage": dict(config.lineage),
        "summary": summary or {},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_lineage(output_dir: str | Path, record: dict[str, Any]) -> Path:
    path = Path(output_dir) / LINEAGE_FILE
    path.write_text(json.dumps(record, indent=2, sort_keys=False, default=str))
    return path


def read_lineage(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / LINEAGE_FILE
    return json.loads(path.read_text()) if path.exists() else None
