"""Output folders are written under a temporary name and renamed when complete.

A reader (the next run, a downstream asset, `cascade lineage`) trusts a folder
`<root>/<asset>/<version>/` only because it exists: a rename is atomic, so a kill mid-write
leaves a temporary folder, never a half-written version. Two kinds of temporary name:

  `<version>.partial/`   a checkpoint being trained: it IS the resume state (trainer
                         checkpoints, metrics so far), so a rerun trains on in the same folder
  `.tmp-<version>-<id>/`  anything rebuilt from scratch (datasets: curation.versioning; evals;
                         the forgetting matrix): a leftover is useless and removed by
                         `clean_leftovers` when the next run holds the home lock

`CASCADE_TEST_KILL_AT=<window>[:<asset>]` makes the process SIGKILL itself at that named point
(`checkpoint_publish`: trained and recorded, before the rename; `eval_write`: eval.json written,
before its record and rename), so tests kill inside a write window deterministically.
"""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

from spec import lineage_verify
from spec.lineage import LINEAGE_FILE
from spec.paths import portable_path

KILL_ENV = "CASCADE_TEST_KILL_AT"
PARTIAL_SUFFIX = ".partial"
TEMP_PREFIX = ".tmp-"


def kill_point(window: str, asset: str | None = None) -> None:
    """Die here, as a kill -9 would, when `$CASCADE_TEST_KILL_AT` names this window, alone or as
    `<window>:<asset>` (tests only)."""
    if os.environ.get(KILL_ENV) in (window, f"{window}:{asset}"):
        os.kill(os.getpid(), signal.SIGKILL)


def partial_folder(final: Path) -> Path:
    """Where a checkpoint is trained before it is published: `<version>.partial`, stable so that
    a rerun resumes it. A folder left at the final name by an older, in-place writer and never
    finished is moved there, so its resume state is kept and it is never trusted as finished."""
    work = final.with_name(final.name + PARTIAL_SUFFIX)
    if final.is_dir() and not work.exists():  # only called when `final` is not complete
        final.rename(work)
    elif final.is_dir():  # beside a .partial that already holds the resume state: out of the way
        set_aside(final)
    return work


def set_aside(folder: Path) -> Path:
    """Move an untrustworthy `folder` out of the way, to a temporary name `clean_leftovers` removes."""
    return lineage_verify.set_aside(folder, prefix=TEMP_PREFIX)


def temp_folder(final: Path) -> Path:
    """A fresh private folder beside `final` for output that is written in one go."""
    tmp = final.parent / f"{TEMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, final: Path, window: str | None = None) -> Path:
    """Rename the finished `tmp` to `final`. When `final` appeared meanwhile (a concurrent step
    made the same version), that one is kept and `tmp` removed; a `final` without its lineage
    record (an older in-place writer cut short) is set aside first."""
    if window:
        kill_point(window, final.parent.name)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.is_dir() and not (final / LINEAGE_FILE).is_file():
        set_aside(final)
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def retarget(value: Any, old: Path, new: Path) -> Any:
    """`value` (a lineage record: nested dicts and lists) with every path in `old` naming `new`
    instead, portable (`${CASCADE_HOME}/...`) and absolute forms alike."""
    pairs = [(str(old), str(new)), (portable_path(old), portable_path(new))]
    if isinstance(value, str):
        for a, b in pairs:
            if value == a or value.startswith(a + "/"):
                return b + value[len(a):]
        return value
    if isinstance(value, dict):
        return {k: retarget(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [retarget(v, old, new) for v in value]
    return value


def clean_leftovers(home: Path) -> list[Path]:
    """Remove `.tmp-*` folders (and files) a killed run left under `<home>/<data|evals|checkpoints>/
    <asset>/`. Only safe while holding the home lock (no run is writing them); `.partial`
    checkpoints are resume state and stay."""
    removed = []
    for root in ("data", "evals", "checkpoints"):
        for leftover in sorted(Path(home, root).glob(f"*/{TEMP_PREFIX}*")):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
            removed.append(leftover)
    return removed
