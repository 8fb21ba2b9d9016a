"""Read-only commands on a home that cannot be written: the lineage records stand in for Dagster.

Opening the home's Dagster instance writes to it (the instance lock, `dagster.yaml`, SQLite's
journal), so on a read-only home (a read-only mount, a colleague's folder, a full disk's
remount) it fails. `cascade lineage`, `cascade status` and `cascade report` then read the
lineage records under the home instead (`open_for_reading`): each asset's latest output is the
record folder of that asset written last. `RecordsView` answers the one question those commands
ask the instance, `get_latest_materialization_event(asset_key)`, from the records; staleness is
Dagster's to compute, so `status` shows none (`stale: null`) and says why.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable


class RecordsView:
    """The latest output of each asset under a home, from its lineage records (no Dagster)."""

    def __init__(self, home: Path) -> None:
        from dagster_project.verify_command import record_folders
        from spec.lineage import LINEAGE_FILE, read_record

        self.home = Path(home)
        latest: dict[str, tuple[float, Path, dict[str, Any]]] = {}
        for folder in record_folders(self.home):
            record = read_record(folder)
            if not record or not record.get("asset"):
                continue
            written = (folder / LINEAGE_FILE).stat().st_mtime
            if record["asset"] not in latest or written > latest[record["asset"]][0]:
                latest[record["asset"]] = (written, folder, record)
        self.latest = {asset: (folder, record) for asset, (_, folder, record) in latest.items()}

    def get_latest_materialization_event(self, asset_key: Any) -> Any:
        """A stand-in for Dagster's event: its materialization's `path` and `data_version`
        metadata, and the version tag, from the asset's latest record; None when it has none."""
        found = self.latest.get(asset_key.path[-1])
        if found is None:
            return None
        folder, record = found
        version = str(record.get("data_version"))
        metadata = {"path": SimpleNamespace(value=str(folder)), "data_version": SimpleNamespace(value=version)}
        return SimpleNamespace(asset_materialization=SimpleNamespace(
            metadata=metadata, tags={"dagster/data_version": version}))


def dagster_home() -> Path:
    from spec.paths import cascade_home

    return Path(os.environ.get("DAGSTER_HOME") or cascade_home() / "dagster").resolve()


def open_for_reading(command: str, get_instance: Callable[[], Any]) -> tuple[Any, bool]:
    """`(instance, writable)`: the home's Dagster instance (`get_instance()`), or, when the home is
    read-only, a `RecordsView` of its records (and a note on stderr naming the home)."""
    from dagster_project.run_output import READ_ONLY
    from spec.paths import cascade_home

    home = cascade_home()
    if _can_write(dagster_home()) and _can_write(home):
        try:
            return get_instance(), True
        except Exception as err:  # noqa: BLE001 - only a read-only home falls back; the rest is raised
            if not any(marker in f"{err}" for marker in READ_ONLY):
                raise
    print(f"cascade {command}: the home {home} is read-only (its Dagster instance cannot be opened): "
          "reading its lineage records instead; staleness is not known without it", file=sys.stderr)
    return RecordsView(home), False


def _can_write(folder: Path) -> bool:
    """Whether `folder` (or its first existing parent, when it does not exist yet) takes writes."""
    existing = next((f for f in (folder, *folder.parents) if f.exists()), None)
    return existing is not None and os.access(existing, os.W_OK)


def record_statuses(defs: Any, view: RecordsView) -> list[dict[str, Any]]:
    """`cascade status` rows from the records: materialized, data version, rows; `stale` is None
    (Dagster's to say) and `problems` what spec.lineage_verify finds in the record's folder."""
    from assets.common import materialization_problems
    from dagster_project.accounting import record_rows

    rows = []
    for k in sorted(defs.resolve_asset_graph().materializable_asset_keys, key=lambda k: k.to_user_string()):
        found = view.latest.get(k.path[-1])
        problems = materialization_problems(view, k) if found else []
        rows.append({"asset": k.path[-1], "key": k.to_user_string(), "materialized": found is not None,
                     "data_version": found[1].get("data_version") if found else None, "stale": None,
                     "dagster_status": "unknown (read-only home)", "stale_causes": [], "problems": problems,
                     "rows": record_rows(found[0]) if found else None})
    return rows
