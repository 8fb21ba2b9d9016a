"""The import contracts of pyproject.toml ([tool.importlinter]) hold: package layering, no Dagster
below the asset layer, a lightweight `spec`, the trainer stage contract above its backends, and no
import cycles inside any package. Runs `lint-imports` from this interpreter's venv; when it fails,
its output names each broken contract and the import chain (file and line) that breaks it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_import_contracts_hold() -> None:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the dev extra (pip install -e '.[dev]')")
    # --no-cache: always analyse the tree as it is now (the whole run takes well under a second).
    proc = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"lint-imports exited {proc.returncode}: an import contract in pyproject.toml is broken\n"
        f"{proc.stdout}\n{proc.stderr}"
    )
