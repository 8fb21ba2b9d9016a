"""The lineage record of a trained checkpoint, through the one writer (`spec.lineage`).

A checkpoint has one version. Launched by the platform, the stage config carries the asset's
lineage keys (`config.lineage`: asset, data_version, code_version, inputs) and the record uses
them as they are. Run by hand (`cascade train`), the version hashes what determines the result
(the parent's version, the dataset version, every reward's source version, the config hash) with
the same `stable_hash`, and the inputs name the parent checkpoint and the dataset.

Besides the common keys the record holds the trainer's algorithm, backend, parent and dataset, the
rewards with their versions, the full config and its hash, seed, library versions, the git
commit and the run summary: enough to audit a checkpoint without Dagster.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from spec.hashing import file_digest, stable_hash
from spec.lineage import input_ref, make_record, read_record

__all__ = ["build_lineage", "read_lineage"]
_LIBRARIES = ("torch", "transformers", "tokenizers", "deepspeed", "trl", "accelerate", "pyarrow", "numpy")


def dataset_ref(path: str | Path) -> dict[str, Any]:
    """The dataset as a lineage input: its record's asset and version, else a content hash."""
    path = Path(path)
    record = read_record(path) if path.exists() else None
    if record and record.get("data_version"):
        return input_ref(record.get("asset") or path.parent.name, record["data_version"], path)
    return input_ref(path.name, file_digest(path) if path.exists() else "missing", path)


def parent_ref(policy: str | Path) -> dict[str, Any]:
    """The input checkpoint as a lineage input: its record's version, else a hash of its weights."""
    policy = Path(policy)
    record = read_record(policy) if policy.is_dir() else None
    if record and record.get("data_version"):
        return input_ref(record.get("asset") or policy.name, record["data_version"], policy)
    weights = policy / "model.safetensors"
    return input_ref(policy.name, file_digest(weights) if weights.exists() else "missing", policy)


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


def build_lineage(config: Any, algorithm: str, rewards: list[dict[str, Any]] | None = None,
                  summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The lineage record of a stage run (`rewards`: [{name, version, weight, options}])."""
    rewards = rewards or []
    parent, dataset = parent_ref(config.policy), dataset_ref(config.dataset)
    config_hash = config.config_hash()
    given = dict(config.lineage)
    if given.get("data_version"):  # the platform decided this checkpoint's version and inputs
        asset, version = given.get("asset") or Path(config.output_dir).name, given["data_version"]
        code_version, inputs = given.get("code_version"), given.get("inputs") or [parent, dataset]
    else:
        asset, code_version, inputs = Path(config.output_dir).name, None, [parent, dataset]
        version = stable_hash({"parent": parent["data_version"], "dataset": dataset["data_version"],
                               "rewards": [(r["name"], r["version"]) for r in rewards], "config": config_hash}, 32)
    return make_record(
        asset, version, config.output_dir, code_version, inputs,
        algorithm=algorithm, backend=config.backend, parent=parent, dataset=dataset, rewards=rewards,
        config=config.model_dump(mode="json"), config_hash=config_hash, seed=config.seed,
        libraries=library_versions(), git=git_commit(), summary=summary or {},
        **({"overrides": given["overrides"]} if given.get("overrides") else {}))


def read_lineage(folder: str | Path) -> dict[str, Any] | None:
    """The record of a checkpoint folder, None when the stage has not finished."""
    return read_record(folder) if Path(folder).is_dir() else None
