"""What a failure looks like in the terminal: one line for the cause, the traceback in a log.

A failed step prints `FAILED <asset>: <cause>` and the log path. The cause is the user code's
error, not Dagster's wrapper around it (`DagsterExecutionStepExecutionError` and kin are
unwrapped along their `cause` chain). The full tracebacks go to `$CASCADE_HOME/logs/<run id>.log`
(a temporary folder when the home cannot be written) and, with `cascade run --debug`, to the
terminal, once: Dagster's own console logger is kept quiet (`console_config`), so it does not
print them a second and third time.

Faults of the environment rather than of the recipe or the code say what to do: a full disk
names the home with its free space (`shutil.disk_usage`), a read-only home names the home and
that `cascade lineage | status | report` still read it (dagster_project.read_only), whether a
step met them or the CLI did (`report_exception`: the instance's SQLite, the home lock).
`report_run` prints the rest of a run's end: failed checks, the forgetting matrix, the row
accounting, the checkpoints and the time spent.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Iterable

# Dagster's wrappers around the error an asset body raised; the cause chain leads to that error.
DAGSTER_WRAPPERS = ("DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError",
                    "DagsterExecutionLoadInputError", "DagsterExecutionHandleOutputError",
                    "DagsterResourceFunctionError", "DagsterExecutionInterruptedError")
CAUSE_CHARS = 600
FULL_DISK = (f"[Errno {errno.ENOSPC}]", "No space left on device", "database or disk is full")
READ_ONLY = (f"[Errno {errno.EROFS}]", "Read-only file system", f"[Errno {errno.EACCES}]", "Permission denied",
             "unable to open database file", "attempt to write a readonly database")


def console_config() -> dict[str, Any]:
    """Run config for Dagster's console logger: silent below CRITICAL, so a failed step's
    traceback is not printed by Dagster (its STEP_FAILURE and RUN_FAILURE events each carry one,
    at ERROR); `cascade run` prints the cause itself (`report_failures`), the traceback with --debug."""
    return {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def user_error(error: Any) -> Any:
    """The error the user's code raised inside a Dagster step error (a SerializableErrorInfo)."""
    while error is not None and error.cls_name in DAGSTER_WRAPPERS and error.cause is not None:
        error = error.cause
    return error


def one_line(error: Any) -> str:
    """`Class: message` of a SerializableErrorInfo on one line, the module path left out."""
    message = " ".join((error.message or "").split())
    head, sep, rest = message.partition(": ")
    if sep and head.rsplit(".", 1)[-1] == error.cls_name:
        message = f"{error.cls_name}: {rest}" if error.cls_name != "Failure" else rest
    elif not message:
        message = error.cls_name
    return message if len(message) <= CAUSE_CHARS else message[:CAUSE_CHARS] + " ..."


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def environment_problem(text: str, home: Path) -> str | None:
    """What to do about a fault of the disk the home is on (full, read-only) named in an error's
    text; None when the error is not one of those."""
    if any(marker in text for marker in FULL_DISK):
        usage = _usage(home)
        free = f"{_size(usage.free)} free of {_size(usage.total)}" if usage else "free space unknown"
        return (f"the disk holding the home {home} is full ({free}); the step needs more space than is free: "
                "free space there, or set CASCADE_HOME to a folder on a larger disk")
    if any(marker in text for marker in READ_ONLY) and not _writable(home):
        return read_only_message(home)
    return None


def read_only_message(home: Path) -> str:
    return (f"the home {home} is read-only (it cannot be written: a read-only mount or missing permissions); "
            "make it writable or set CASCADE_HOME to a writable folder. `cascade lineage`, `cascade status` "
            "and `cascade report` still read its records")


def _usage(home: Path) -> Any:
    for folder in (home, *home.parents):
        try:
            return shutil.disk_usage(folder)
        except OSError:
            continue
    return None


def _writable(home: Path) -> bool:
    """Whether a file can be made in the home (or, when it does not exist yet, its first existing parent)."""
    folder = next((f for f in (home, *home.parents) if f.exists()), None)
    if folder is None:
        return False
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def write_log(home: Path, name: str, text: str) -> Path:
    """`text` into `<home>/logs/<name>.log`; when the home cannot take it (read-only, full), into
    the system's temporary folder, so the traceback is kept somewhere and its path can be printed."""
    for folder in (home / "logs", Path(tempfile.gettempdir()) / "cascade-logs"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}.log"
            path.write_text(text)
            return path
        except OSError:
            continue
    raise OSError(f"cannot write the log {name}.log under {home}/logs or the temporary folder")


def _asset_names(asset_keys: Iterable[Any]) -> dict[str, str]:
    """Step key (`sources__raw_x`) -> asset key (`sources/raw_x`)."""
    return {"__".join(k.path): k.to_user_string() for k in asset_keys}


def report_failures(result: Any, asset_keys: Iterable[Any], home: Path, debug: bool = False) -> Path | None:
    """Print one line per failed step (`FAILED <asset>: <cause>`, and what to do about a full or
    read-only disk), write every failure's full traceback to the run's log, print the log's path;
    with `debug` print the tracebacks too. Returns the log path (None when no step failed)."""
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    if not failures:
        return None
    names = _asset_names(asset_keys)
    sections, hints = [], []
    for event in failures:
        error = event.event_specific_data.error
        cause = user_error(error)
        asset = names.get(event.step_key, event.step_key)
        print(f"FAILED {asset}: {one_line(cause)}", file=sys.stderr)
        hint = environment_problem(error.to_string(), home)
        if hint and hint not in hints:
            hints.append(hint)
            print(f"  {hint}", file=sys.stderr)
        sections.append(f"=== {asset} (step {event.step_key}) ===\n{cause.to_string()}")
    text = "\n\n".join(sections) + "\n"
    log = write_log(home, result.run_id, text)
    if debug:
        print(text, file=sys.stderr, end="")
    print(f"  full traceback: {log}" + ("" if debug else " (or run with --debug)"), file=sys.stderr)
    return log


def report_exception(command: str, err: BaseException, home: Path, debug: bool = False) -> str | None:
    """For an error that reached the CLI: one line naming a full or read-only home and what to do,
    its traceback in a log (and on the terminal with `debug`); None when it is no such fault."""
    text = "".join(traceback.format_exception(err))
    hint = environment_problem(f"{type(err).__name__}: {err}\n{text}", home)
    if hint is None:
        return None
    log = write_log(home, f"{command}-{os.getpid()}", text)
    if debug:
        print(text, file=sys.stderr, end="")
    cause = " ".join(str(err).split())[:CAUSE_CHARS]
    return f"cascade {command}: {hint}\n  cause: {type(err).__name__}: {cause}\n  full traceback: {log}"


def report_run(defs: Any, instance: Any, result: Any, wall: float, work: float | None, recipe: Any,
               debug: bool = False) -> None:
    """The end of `cascade run`: failed steps (`report_failures`) and checks, the forgetting matrix,
    the row accounting, the checkpoints' folders, the wall time and the orchestration overhead."""
    from assets.common import latest_metadata
    from dagster_project.accounting import accounting_table
    from spec.paths import cascade_home

    graph = defs.resolve_asset_graph()
    report_failures(result, graph.get_all_asset_keys(), cascade_home(), debug)
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            if not data.passed:  # the check's own sentence when it has one (rows_kept), else its metadata
                print(f"CHECK FAILED {data.asset_key.to_user_string()}:{data.check_name}: " + (data.description or
                      json.dumps({k: v.value for k, v in data.metadata.items()}, default=str)), file=sys.stderr)
    try:
        matrix_key = next(k for k in graph.materializable_asset_keys if k.path[-1] == "forgetting_matrix")
        matrix = Path(latest_metadata(instance, matrix_key)["path"]) / "forgetting.md"
        print("\nForgetting matrix (held-out score, points; rows = domains, columns = checkpoints):")
        print(matrix.read_text())
    except Exception:  # noqa: BLE001 - a recipe without evals has no matrix
        pass
    table = accounting_table(recipe, instance)
    if table:
        print(f"\n{table}\n")
    print("Checkpoints:")
    for k in sorted(graph.materializable_asset_keys, key=lambda k: k.to_user_string()):
        if k.path[0] == "checkpoints":
            try:
                print(f"  {k.path[-1]:<14} {latest_metadata(instance, k)['path']}")
            except Exception:  # noqa: BLE001
                print(f"  {k.path[-1]:<14} (not materialized)")
    if work is None:  # steps ran in other processes: their library time is not measured here
        print(f"\n{'succeeded' if result.success else 'FAILED'} in {wall:.0f} s")
        return
    overhead = max(0.0, wall - work)
    print(f"\n{'succeeded' if result.success else 'FAILED'} in {wall:.0f} s; library work {work:.0f} s, "
          f"orchestration overhead {overhead:.0f} s ({100 * overhead / max(wall, 1e-9):.1f}%)")
