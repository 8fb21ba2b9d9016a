"""What a materialized home produced, leaving out everything a refactor may change by design.

A refactor of the wiring (issue 31: stage kinds, the trainer contract, the store resource) must not
change what the cascade computes. Code versions, and so checkpoint and eval versions (input hashes
that include the code), change with every edit; the results must not. A fingerprint keeps:
- every dataset's data version (a content hash of its rows),
- every checkpoint's weights: per tensor, the sha256 of its bytes and its float64 sum and sum of
  absolute values (the sums let another CPU's last-bit differences be told from a real change),
- every eval's per-domain, per-mode score.

`python -m tests.e2e.fingerprint HOME > tests/e2e/snapshots/tiny_outputs.json` writes the snapshot
that tests/e2e/test_cascade.py compares a fresh tiny home with.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any


def _only_version(folder: Path) -> Path:
    versions = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "lineage.json").exists())
    if len(versions) != 1:
        raise ValueError(f"{folder}: expected one finished version in a fresh home, found {len(versions)}")
    return versions[0]


def _tensors(path: Path) -> dict[str, list[Any]]:
    from safetensors.numpy import load_file

    out = {}
    for name, array in sorted(load_file(str(path)).items()):
        wide = array.astype("float64")
        out[name] = [hashlib.sha256(array.tobytes()).hexdigest()[:16], float(wide.sum()), float(abs(wide).sum())]
    return out


def fingerprint(home: str | Path) -> dict[str, Any]:
    """Datasets' data versions, checkpoints' tensor digests and sums, evals' scores of a fresh home."""
    home = Path(home)
    datasets = {f.name: json.loads((_only_version(f) / "lineage.json").read_text())["data_version"]
                for f in sorted((home / "data").iterdir()) if f.is_dir()}
    checkpoints = {f.name: _tensors(_only_version(f) / "model.safetensors")
                   for f in sorted((home / "checkpoints").iterdir()) if f.is_dir()}
    evals = {}
    for folder in sorted((home / "evals").iterdir()):
        result = _only_version(folder) / "eval.json"
        if result.exists():
            scores = json.loads(result.read_text())
            evals[folder.name] = {domain: {mode: cell["score"] for mode, cell in modes.items() if isinstance(cell, dict)
                                           and "score" in cell}
                                  for domain, modes in scores.items() if isinstance(modes, dict)}
    return {"datasets": datasets, "checkpoints": checkpoints, "evals": evals}


def differences(before: dict[str, Any], after: dict[str, Any], rel: float = 1e-4) -> list[str]:
    """What differs: any dataset version; a tensor whose bytes differ and whose sums differ by more than
    `rel` (relative); an eval score (only where the checkpoint's bytes differ is a small drift allowed)."""
    out = []
    for section in ("datasets", "checkpoints", "evals"):
        missing = sorted(set(before[section]) ^ set(after[section]))
        if missing:
            out.append(f"{section}: only in one of the two: {missing}")
    for name in sorted(set(before["datasets"]) & set(after["datasets"])):
        if before["datasets"][name] != after["datasets"][name]:
            out.append(f"dataset {name}: {before['datasets'][name]} -> {after['datasets'][name]}")
    exact = True
    for stage in sorted(set(before["checkpoints"]) & set(after["checkpoints"])):
        for tensor, (digest, total, absolute) in before["checkpoints"][stage].items():
            new = after["checkpoints"][stage].get(tensor)
            if new is None:
                out.append(f"checkpoint {stage}: tensor {tensor} is gone")
            elif new[0] != digest:
                exact = False
                if abs(new[2] - absolute) > rel * max(abs(absolute), 1.0) or abs(new[1] - total) > rel * max(absolute, 1.0):
                    out.append(f"checkpoint {stage}: tensor {tensor} changed (sum {total} -> {new[1]}, |sum| {absolute} -> {new[2]})")
    for stage in sorted(set(before["evals"]) & set(after["evals"])):
        if exact and before["evals"][stage] != after["evals"][stage]:
            out.append(f"eval {stage}: {before['evals'][stage]} -> {after['evals'][stage]}")
    return out


if __name__ == "__main__":
    print(json.dumps(fingerprint(sys.argv[1]), indent=1, sort_keys=True))
