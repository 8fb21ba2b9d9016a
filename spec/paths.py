"""Where the project and its generated files live.

Everything a run writes (data versions, checkpoints, evals, the Dagster instance) lives under
one ignored folder, `$CASCADE_HOME` (default `.cascade/` in the repository), so a clean clone
starts empty and `make clean` is one `rm -rf`. What is stored about those files (Dagster metadata,
lineage records) names them relative to the home (`${CASCADE_HOME}/checkpoints/...`), so a home
that is moved or copied, with its Dagster instance inside, still resolves.
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


HOME_TOKEN = "${CASCADE_HOME}"
"""How stored paths under the home are written (metadata, lineage records): a moved or copied home still resolves."""


def portable_path(path: str | os.PathLike) -> str:
    """`path` with the current `$CASCADE_HOME` prefix replaced by `${CASCADE_HOME}`; other paths unchanged."""
    text, home = str(path), str(cascade_home())
    if text == home or text.startswith(home + os.sep):
        return HOME_TOKEN + text[len(home):]
    return text


def resolve_home_path(path: str | os.PathLike) -> Path:
    """A stored path made usable: `${CASCADE_HOME}` expands to the current home."""
    text = str(path)
    return cascade_home() / text[len(HOME_TOKEN):].lstrip("/\\") if text.startswith(HOME_TOKEN) else Path(text)


def portable(value: object) -> object:
    """`value` (a record, nested dicts/lists) with every string path under the home made portable."""
    if isinstance(value, str):
        return portable_path(value) if value.startswith(str(cascade_home())) else value
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return value
