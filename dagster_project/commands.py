"""`cascade run`, `cascade status` and `cascade lineage`: the recipe's assets from a terminal.

`cascade run` ends with the row accounting of every source and corpus, and `status --json` /
`lineage --json` carry the same numbers per dataset (`rows`; dagster_project.accounting).
All three talk to the same Dagster instance the UI uses (`$CASCADE_HOME/dagster`: local SQLite,
or PostgreSQL when the recipe's `storage.backend` is postgres), in process: no webserver or
daemon has to be running.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster_project.home_lock import command_line, home_lock, instance_lock, recover_home, run_tags

if TYPE_CHECKING:
    from spec.storage import StorageConfig


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="materialize the recipe's assets (default: all)")
    run.add_argument("--recipe", help="recipe YAML (default: $CASCADE_RECIPE or recipes/default.yaml)")
    run.add_argument("--stale", action="store_true", help="only stale or missing assets and their downstream")
    run.add_argument("--select", help="comma-separated assets (last key component is enough); `+name`: with all "
                     "its ancestors, `name+`: descendants, or Dagster's selection syntax (dagster_project.selection)")
    run.add_argument("--debug", action="store_true", help="print a failed step's full traceback too (always in the log)")
    run.add_argument("--wait", action="store_true",
                     help="when another run holds this CASCADE_HOME, wait for it instead of exiting at once (exit 3)")
    _add_set(run)
    run.set_defaults(func=cmd_run)

    status = sub.add_parser("status", help="every asset: materialized, data version, stale (Dagster's view)")
    status.add_argument("--recipe")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    _add_set(status)
    status.set_defaults(func=cmd_status)

    lineage = sub.add_parser("lineage", help="full input tree of an asset's latest materialization")
    lineage.add_argument("asset", help="asset name, e.g. math_rl (the last key component is enough)")
    lineage.add_argument("--recipe")
    lineage.add_argument("--json", action="store_true")
    _add_set(lineage)
    lineage.set_defaults(func=cmd_lineage)


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="FIELD.PATH=VALUE",
                        help="override a recipe field without editing the file (repeatable), e.g. "
                             "rl_stages.math_rl.train.max_steps=20; validated like the file, recorded in lineage")


def get_instance(storage: StorageConfig | None = None):
    """The project's Dagster instance (`$DAGSTER_HOME`, default `$CASCADE_HOME/dagster`), its
    dagster.yaml matching the recipe's `storage` block when one is given (ensure_instance_config)."""
    import dagster as dg

    from dagster_project.read_only import dagster_home

    # Dagster insists on an absolute DAGSTER_HOME.
    home = dagster_home()
    os.environ["DAGSTER_HOME"] = str(home)
    # The first open creates and migrates the SQLite storages; two processes doing it at once
    # collide (`table runs already exists`), so every command opens the instance under a short lock.
    with instance_lock(home):
        ensure_instance_config(home, storage)
        instance = dg.DagsterInstance.get()
        instance.run_storage, instance.event_log_storage, instance.schedule_storage  # noqa: B018 - built here
    return instance


# Local SQLite storage under DAGSTER_HOME unless the recipe says postgres; no telemetry from CI;
# no first-visit pop-up in the UI.
INSTANCE_SETTINGS = {"telemetry": "telemetry:\n  enabled: false\n", "nux": "nux:\n  enabled: false\n"}


class InstanceStorageError(ValueError):
    """The home's Dagster instance is stored elsewhere than the recipe's `storage:` block says."""


def _postgres_storage(storage: StorageConfig) -> dict:
    """dagster-postgres' instance storage (through dagster_project.pg_storage, which picks its
    driver), its URL read from `$<url_env>` by every process that opens the instance."""
    return {"custom": {"module": "dagster_project.pg_storage", "class": "PostgresStorage",
                       "config": {"postgres_url": {"env": storage.url_env}}}}


def _postgres_block(storage: StorageConfig) -> str:
    import yaml

    return yaml.safe_dump({"storage": _postgres_storage(storage)}, sort_keys=False)


def sqlite_history(home: Path) -> list[Path]:
    """The SQLite files of a Dagster home's run history (runs, event logs, schedules), if any."""
    return sorted(p for pattern in ("history/*.db", "history/runs/*.db", "schedules/*.db", "storage/*.db")
                  for p in home.glob(pattern))


def _storage_settings(home: Path, text: str, storage: StorageConfig) -> str:
    """The `storage:` block to append for `storage` ("" when the file already matches), or
    InstanceStorageError. Decided: a home keeps one history. Switching an existing SQLite home to
    PostgreSQL (or back) fails here instead of starting a second, empty history beside the first:
    the data versions and staleness Dagster reports would silently restart. Start the other
    backend on a new CASCADE_HOME (the files of the old one are untouched), or keep the backend."""
    import yaml

    current = (yaml.safe_load(text) or {}).get("storage") if text.strip() else None
    wanted = _postgres_storage(storage)
    config = home / "dagster.yaml"
    if storage.backend == "embedded":
        if isinstance(current, dict) and ("postgres" in current or
                                          (current.get("custom") or {}).get("module") == wanted["custom"]["module"]):
            raise InstanceStorageError(
                f"{config} keeps this home's runs in PostgreSQL, but the recipe's storage.backend is embedded "
                "(SQLite): set `storage: {backend: postgres}` in the recipe, or use another CASCADE_HOME")
        return ""
    if current == wanted:
        return ""
    if current is not None:
        raise InstanceStorageError(
            f"{config} already has a `storage:` block ({current}) that is not the recipe's "
            f"(PostgreSQL from ${storage.url_env}): fix one of the two, or use another CASCADE_HOME")
    history = sqlite_history(home)
    if history:
        raise InstanceStorageError(
            f"the Dagster home {home} already keeps its run history in SQLite ({history[0].name}, ...); "
            "switching it to PostgreSQL would start a second, empty history and lose the data versions "
            "Dagster knows. Use a new CASCADE_HOME for `storage.backend: postgres`, or keep `embedded` here")
    return _postgres_block(storage)


def ensure_instance_config(home: Path | str | None = None, storage: StorageConfig | None = None) -> Path:
    """Write `<DAGSTER_HOME>/dagster.yaml` (`make ui` and every command call this): telemetry and
    the UI's first-visit pop-up (`nux`) off, and, given the recipe's `storage` block with
    `backend: postgres`, dagster-postgres storage (`storage: custom:` dagster_project.pg_storage
    with `postgres_url: {env: <url_env>}`: the URL stays in the environment). A file the user
    wrote keeps its settings; only the top-level keys it lacks are appended. A home whose
    existing history is in the other backend raises InstanceStorageError (`_storage_settings`);
    `storage=None` (`make ui`, commands without a recipe) checks nothing."""
    from dagster_project.read_only import dagster_home

    home = Path(home).resolve() if home else dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    with instance_lock(home):  # two first starts would both append the missing blocks
        text = config.read_text() if config.exists() else ""
        present = {line.split(":", 1)[0].strip() for line in text.splitlines() if line and not line[0].isspace()}
        missing = [block for name, block in INSTANCE_SETTINGS.items() if name not in present]
        if storage is not None:
            missing += [block for block in [_storage_settings(home, text, storage)] if block]
        if missing:
            tmp = config.with_name(f".{config.name}.tmp")
            tmp.write_text(text + ("" if not text or text.endswith("\n") else "\n") + "".join(missing))
            tmp.replace(config)
    return config


def _context(recipe_path: str | None, overrides: list[str] | None = None):
    from assets import build_definitions
    from assets.common import WorkTimer
    from dagster_project.recipe import load_recipe

    recipe = load_recipe(recipe_path, overrides=overrides or ())
    timer = WorkTimer()
    return recipe, build_definitions(recipe, timer), timer


def resolve_key(defs, name: str):
    """An asset key from its full path (`checkpoints/math_rl`) or its last component (`math_rl`)."""
    graph = defs.resolve_asset_graph()
    keys = list(graph.get_all_asset_keys())
    exact = [k for k in keys if k.to_user_string() == name]
    matches = exact or [k for k in keys if k.path[-1] == name]
    if len(matches) != 1:
        hint = "ambiguous" if matches else "unknown"
        raise ValueError(f"{hint} asset {name!r}; known: {sorted(k.path[-1] for k in keys)}")
    return matches[0]


def observe_sources(defs, instance, keys: list | None = None) -> None:
    """Hash the raw files (`keys` of them; default all), writing built-in sample data first when missing."""
    from assets import OBSERVE_JOB
    from dagster_project.run_output import console_config

    if keys != []:  # none to observe (a selection that reads no raw file)
        defs.resolve_job_def(OBSERVE_JOB).execute_in_process(instance=instance, run_config=console_config(),
                                                             tags=run_tags(), asset_selection=keys)


def asset_statuses(defs, instance) -> list[dict[str, Any]]:
    """Per asset: Dagster's own stale status, plus `stale` propagated to every downstream asset
    (Dagster marks only the direct children of a change; a swap must flag the whole subtree).
    An output whose lineage record does not verify (assets.common.materialization_problems) is
    stale too, its `problems` listed first among its `stale_causes`."""
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._core.loader import LoadingContextForTest

    from assets.common import materialization_problems
    from dagster_project.accounting import record_rows

    graph = defs.resolve_asset_graph()
    resolver = CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance))
    keys = sorted(graph.materializable_asset_keys, key=lambda k: k.to_user_string())
    own = {k: resolver.get_status(k) for k in keys}
    problems = {k: materialization_problems(instance, k) if own[k] != StaleStatus.MISSING else [] for k in keys}
    stale: dict[Any, bool] = {}

    def is_stale(k) -> bool:
        if k not in stale:
            parents = [p for p in graph.get(k).parent_keys if p in own]
            stale[k] = own[k] == StaleStatus.STALE or bool(problems[k]) or (
                own[k] != StaleStatus.MISSING and any(is_stale(p) or own[p] == StaleStatus.MISSING for p in parents))
        return stale[k]

    rows = []
    for k in keys:
        record = instance.get_latest_materialization_event(k)
        version, counts = None, None
        if record and record.asset_materialization:
            meta = record.asset_materialization.metadata
            version = meta["data_version"].value if "data_version" in meta else None
            counts = record_rows(meta["path"].value) if "path" in meta else None
        rows.append({
            "asset": k.path[-1], "key": k.to_user_string(), "materialized": own[k] != StaleStatus.MISSING,
            "data_version": version, "stale": is_stale(k), "dagster_status": own[k].value.lower(),
            "stale_causes": [*problems[k],
                             *(f"{p.to_user_string()}: its output does not verify" for p in
                               sorted(graph.get(k).parent_keys, key=lambda p: p.to_user_string()) if problems.get(p)),
                             *(f"{c.key.asset_key.to_user_string()}: {c.reason}" for c in resolver.get_stale_root_causes(k))],
            "problems": problems[k],
            "rows": counts,  # a dataset's accounting from its lineage record (dagster_project.accounting)
        })
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    from dagster_project.read_only import open_for_reading, record_statuses

    recipe, defs, _ = _context(args.recipe, args.set)
    instance, writable = open_for_reading("status", lambda: get_instance(recipe.storage))
    if writable:
        observe_sources(defs, instance)
    rows = asset_statuses(defs, instance) if writable else record_statuses(defs, instance)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["key"]) for r in rows)
    for r in rows:
        state = "missing" if not r["materialized"] else ("STALE" if r["stale"] else "fresh" if writable else "on disk")
        print(f"{r['key']:<{width}}  {state:<7}  {r['data_version'] or ''}")
        for problem in r.get("problems", []):  # an output whose record does not verify: the cause
            print(f"{'':<{width}}  !! {problem}")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from assets.common import latest_metadata
    from dagster_project.accounting import add_rows
    from dagster_project.read_only import open_for_reading
    from spec.lineage import lineage_tree, render_tree
    from spec.lineage_verify import annotate_tree

    recipe, defs, _ = _context(args.recipe, args.set)
    asset_key = resolve_key(defs, args.asset)
    meta = latest_metadata(open_for_reading("lineage", lambda: get_instance(recipe.storage))[0], asset_key)
    # Every node is checked against its folder (spec.lineage_verify): one that does not verify is marked.
    tree = annotate_tree(lineage_tree({"asset": asset_key.path[-1], "data_version": meta.get("data_version"),
                                       "path": meta["path"]}))
    print(json.dumps(add_rows(tree), indent=2) if args.json else "\n".join(render_tree(tree)))
    return 0


def selection_for(defs, instance, args: argparse.Namespace) -> list | None:
    """Asset keys to run: a `--select` (dagster_project.selection; its upstream must exist), the
    stale/missing set with its downstream, or all (None). Observes the raw files these read."""
    from dagster_project.selection import check_upstream, observed_files, parse_selection

    graph = defs.resolve_asset_graph()
    if args.select:
        keys = parse_selection(graph, args.select, lambda name: resolve_key(defs, name))
        check_upstream(graph, instance, keys, args.select)  # before anything is observed or run
        observe_sources(defs, instance, observed_files(graph, keys))
        return keys
    observe_sources(defs, instance)
    if args.stale:
        todo = {r["key"] for r in asset_statuses(defs, instance) if r["stale"] or not r["materialized"]}
        keys = [k for k in graph.materializable_asset_keys if k.to_user_string() in todo]
        return sorted(keys, key=lambda k: k.to_user_string())
    return None


def cmd_run(args: argparse.Namespace) -> int:
    """Materialize, holding the home lock for the whole run (dagster_project.home_lock): a second
    run on the same home exits at once (HomeBusy, exit 3) or, with --wait, queues behind it."""
    from spec.paths import cascade_home

    def waiting(holder: dict[str, Any]) -> None:
        print(f"cascade run: waiting for the run holding {cascade_home()} (pid {holder.get('pid', '?')}, "
              f"started {holder.get('started', '?')})", file=sys.stderr, flush=True)

    with home_lock(cascade_home(), command_line(), wait=getattr(args, "wait", False), on_wait=waiting):
        return _run_locked(args)


def _run_locked(args: argparse.Namespace) -> int:
    from assets import MAIN_JOB
    from dagster_project.run_output import report_run
    from spec.paths import cascade_home

    recipe, defs, timer = _context(args.recipe, args.set)
    instance = get_instance(recipe.storage)
    recovered = recover_home(instance, cascade_home())  # no other run is writing: safe to clean up
    if recovered:
        print(recovered, flush=True)
    started = time.perf_counter()
    selection = selection_for(defs, instance, args)
    if selection == []:
        print("cascade run: nothing is stale; every asset is up to date")
        return 0
    count = len(selection) if selection is not None else len(defs.resolve_asset_graph().materializable_asset_keys)
    print(f"cascade run: recipe {recipe.name!r}, {count} assets, Dagster home {os.environ['DAGSTER_HOME']}", flush=True)
    for path, value in recipe.overrides.items():
        print(f"  --set {path}={json.dumps(value)}", flush=True)
    executor = defs.resolve_job_def(MAIN_JOB).executor_def.name
    print(f"  executor: {executor} (recipe `execution:`; docs/executors.md)", flush=True)
    result = execute(defs, instance, recipe, selection)
    wall = time.perf_counter() - started
    report_run(defs, instance, result, wall, timer.seconds if executor == "in_process" else None, recipe,
               debug=getattr(args, "debug", False))
    return 0 if result.success else 1


def reconstruct_job(recipe_path: str | None = None, overrides: tuple[str, ...] = ()):
    """The `cascade` job of a recipe, rebuilt in every step process (multiprocess, Celery, k8s)."""
    from assets import MAIN_JOB

    return _context(recipe_path, list(overrides))[1].resolve_job_def(MAIN_JOB)


def execute(defs, instance, recipe, selection: list | None):
    """Run the `cascade` job (or `selection` of it) with the recipe's executor: in this process
    for `in_process`, else as a real run through the instance (`execute_job` on a reconstructable
    job, so step processes and Celery / k8s workers rebuild the same recipe, overrides included)."""
    import dagster as dg

    from assets import MAIN_JOB
    from dagster_project.run_output import console_config

    job = defs.resolve_job_def(MAIN_JOB)
    if job.executor_def.name == "in_process":
        return job.execute_in_process(instance=instance, asset_selection=selection, raise_on_error=False,
                                      run_config=console_config(), tags=run_tags())
    path = str(recipe.path.resolve()) if recipe.path else None
    overrides = tuple(f"{k}={json.dumps(v)}" for k, v in recipe.overrides.items())
    recon = dg.build_reconstructable_job(__name__, reconstruct_job.__name__,
                                         reconstructable_kwargs={"recipe_path": path, "overrides": overrides})
    return dg.execute_job(recon, instance=instance, asset_selection=selection, raise_on_error=False,
                          run_config=console_config(), tags=run_tags())
