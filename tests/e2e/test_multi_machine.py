"""Several machines for real: PostgreSQL, redis-server and two Celery workers started by the test,
the tiny recipe with sharded curation and a sharded generation on the tiny model run through
them with `storage.backend: postgres` — the result equal to the same recipe run in process on
embedded (SQLite) storage, and nothing of the run kept in SQLite.

The two workers stand for two machines: each is its own process in its own working directory,
sharing only what machines share — `$CASCADE_HOME` (the files: datasets, the tiny model) as the
shared filesystem, the Redis broker, and the PostgreSQL database that holds the Dagster
instance (runs, event logs) and both caches (generation samples, reward scores). Servers and
workers come from tests/e2e/servers.py (installed on first use: `make postgres`, `make celery`)
and are stopped by PID.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.e2e.servers import (celery_config, celery_workers, ensure_celery, ensure_postgres, postgres_server,
                               redis_server)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["chat_sft", "math_sft"]
BENCHES = ["humaneval", "gsm8k", "eval_math", "eval_ifeval", "eval_code", "eval_swe", "eval_chat"]
GENERATION = "tiny_math"
SHARDS, GEN_SHARDS = 3, 2
# The tiny recipe plus a generation on the tiny base model (no teacher checkpoint to train first),
# sharded like the sources; `storage:` and `execution:` come from --set below.
RECIPE = f"""\
extends: {ROOT / "recipes" / "tiny.yaml"}
sources:
{chr(10).join(f"  - {{name: {s}, shards: {SHARDS}}}" for s in SOURCES)}
generations:
  - name: {GENERATION}
    input: math_sft
    use: rejection
    model: tiny
    verify: math
    threshold: 0.0        # a random model: keep whatever is well-formed
    samples: 2
    limit: 6
    shards: {GEN_SHARDS}
    sampling: {{max_new_tokens: 8, temperature: 1.0, seed: 3}}
"""


def _keys(defs, names: list[str]) -> list:
    from dagster_project.commands import resolve_key

    return [resolve_key(defs, n) for n in names]


def _versions(instance, defs) -> dict[str, str]:
    from assets.common import latest_metadata
    from dagster_project.commands import resolve_key

    return {n: str(latest_metadata(instance, resolve_key(defs, n))["data_version"])
            for n in [*(f"clean_{s}" for s in SOURCES), GENERATION]}


def _use_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))


def _run(recipe_file: str, sets: list[str], names: list[str]):
    """Build the recipe, open its instance, materialize `names`; (defs, instance, result)."""
    from dagster_project.commands import _context, execute, get_instance, observe_sources

    recipe, defs, _ = _context(recipe_file, sets)
    instance = get_instance(recipe.storage)  # writes dagster.yaml (Postgres storage) before workers read it
    observe_sources(defs, instance)
    result = execute(defs, instance, recipe, _keys(defs, names))
    assert result.success, [e.message for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return defs, instance, result


def test_postgres_celery_two_machines_same_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_celery()
    ensure_postgres()
    import psycopg

    from generation.cache import GenerationCache
    from spec.storage import CACHE_URL_ENV
    from trainer.models import model_folder

    monkeypatch.setenv(CACHE_URL_ENV, "")  # building a recipe sets it (spec.storage): restored after the test

    recipe_file = tmp_path / "multi.yaml"
    recipe_file.write_text(RECIPE)
    benches = [f"bench_{b}" for b in BENCHES]
    targets = [*(f"clean_{s}" for s in SOURCES), GENERATION]

    # Reference: the same recipe in this process on embedded storage (SQLite under its own home).
    plain = tmp_path / "plain"
    _use_home(monkeypatch, plain)
    monkeypatch.delenv("CASCADE_POSTGRES_URL", raising=False)
    _run(str(recipe_file), ["execution.executor=in_process"], benches)
    started = time.perf_counter()
    defs, instance, _ = _run(str(recipe_file), ["execution.executor=in_process"], targets)
    timings = {"in_process_embedded_s": time.perf_counter() - started}
    expected = _versions(instance, defs)
    with GenerationCache() as cache:  # embedded: the samples went to SQLite under the home
        assert cache.path == plain.resolve() / "generation_cache" / "samples.sqlite"
    expected_samples = _sqlite_samples(cache.path)
    assert expected_samples

    home = tmp_path / "shared_home"  # the filesystem both "machines" mount
    _use_home(monkeypatch, home)
    model_folder("tiny")  # the base model on shared storage before the run (two first writers would race)
    with postgres_server() as pg, redis_server(tmp_path) as broker:
        url = pg.create_database("cascade")
        monkeypatch.setenv("CASCADE_POSTGRES_URL", url)
        sets = ["storage.backend=postgres", "execution.executor=celery", f"execution.celery.broker={broker}",
                f"execution.celery.backend={broker}"]
        # The benchmarks in process (fewer Celery steps; their runs go to Postgres too), then the rest on the workers.
        _run(str(recipe_file), [*sets, "execution.executor=in_process"], benches)

        config_dir = celery_config(tmp_path / "celery_config", broker)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(config_dir), str(ROOT)]), "PYTHONWARNINGS": "ignore"}
        machines = [tmp_path / "machine1", tmp_path / "machine2"]
        for folder in machines:
            folder.mkdir()
        with celery_workers(["m1@cascade-test", "m2@cascade-test"], env, tmp_path, cwds=machines) as workers:
            started = time.perf_counter()
            defs, instance, result = _run(str(recipe_file), sets, targets)
            timings["celery_postgres_s"] = time.perf_counter() - started
            _report(timings)
            assert defs.resolve_job_def("cascade").executor_def.name == "celery"
            assert _versions(instance, defs) == expected

            # Every shard step (sources and generation) ran in a worker, and both workers took some.
            starts = [e for e in result.all_events if e.event_type_value == "STEP_START"]
            shard_pids = {e.pid for e in starts if "_shard_" in (e.step_key or "")}
            assert {e.step_key for e in starts if GENERATION in (e.step_key or "") and "_shard_" in e.step_key}
            assert shard_pids == {w.pid for w in workers}, (shard_pids, [w.pid for w in workers])

        # The instance is PostgreSQL: its runs and events are rows there.
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        run_ids = {r.run_id for r in instance.get_runs()}
        assert result.run_id in run_ids and len(run_ids) >= 3  # observe + benches + the Celery run (at least)
        with psycopg.connect(url) as db:
            stored_runs = {r[0] for r in db.execute("SELECT run_id FROM runs").fetchall()}
            materialized = db.execute("SELECT count(*) FROM event_logs WHERE run_id = %s AND "
                                      "dagster_event_type = 'ASSET_MATERIALIZATION'", (result.run_id,)).fetchone()[0]
            samples = db.execute("SELECT key, text FROM samples").fetchall()
            scores = db.execute("SELECT count(*) FROM scores").fetchone()[0]
        assert run_ids <= stored_runs and materialized >= len(targets)
        # The generation cache's rows are in Postgres: the same keys and texts as the reference's SQLite.
        assert {bytes(k): t for k, t in samples} == expected_samples
        assert scores > 0  # the verifier's reward cache followed the storage block too
        instance.dispose()
    # Nothing of the Postgres run was kept in SQLite under the shared home.
    assert not [p for p in home.rglob("*") if p.suffix in (".sqlite", ".db") or p.name.endswith(("-wal", "-shm"))]
    assert (plain / "generation_cache" / "samples.sqlite").exists()  # (the check above would see one)
    assert all(p.poll() is not None for p in workers)


def _report(timings: dict[str, float]) -> None:
    """Print the two wall times (the same targets: sharded curation + sharded generation) and, when
    $CASCADE_MULTI_MACHINE_TIMINGS names a file, write them there (benchmarks/bench_multi_machine.py)."""
    print(f"\nmulti-machine wall: in process on SQLite {timings['in_process_embedded_s']:.1f} s, "
          f"two Celery workers on PostgreSQL {timings['celery_postgres_s']:.1f} s")
    if os.environ.get("CASCADE_MULTI_MACHINE_TIMINGS"):
        Path(os.environ["CASCADE_MULTI_MACHINE_TIMINGS"]).write_text(json.dumps(timings))


def _sqlite_samples(path: Path) -> dict[bytes, str]:
    """{key: text} of a SQLite generation cache."""
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return {bytes(k): t for k, t in db.execute("SELECT key, text FROM samples")}
    finally:
        db.close()
