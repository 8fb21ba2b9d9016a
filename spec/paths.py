"""Where the project and its generated files live.

Everything a run writes (data versions, checkpoints, evals, the Dagster instance) lives under
one ignored folder, `$CASCADE_HOME` (default `.cascade/` in the repository), so a clean clone
starts empty and `make clean` is one `rm -rf`.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository (or installed source tree) root; code hashes are taken relative to it."""
DEFAULT_RECIPE = REPO_ROOT / "recipes" / "default.yaml"
"""The recipe `make run` materializes when `$CASCADE_RECIPE` is unset."""


def cascade_home() -> Path:
    """Root of generated data, checkpoints and the Dagster instance (`$CASCADE_HOME`)."""
    return Path(os.environ.get("CASCADE_HOME", REPO_ROOT / ".cascade")).resolve()
