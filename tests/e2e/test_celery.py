"""The Celery executor for real: redis-server and two Celery workers started by the test, the
tiny recipe's sharded curation run through them, the result equal to the in-process run.

What it needs (redis-server from Debian, dagster-celery, celery, redis) is installed by
`make celery` (scripts/setup_celery.sh) when missing, as tests/generation/vllm_env.py does
for vLLM; the servers are started by tests/e2e/servers.py (shared with test_multi_machine.py)
and every process the test starts is stopped by its PID.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.servers import celery_config, celery_workers, ensure_celery, redis_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["chat_sft", "math_sft"]
BENCHES = ["humaneval", "gsm8k", "eval_math", "eval_ifeval", "eval_code", "eval_swe", "eval_chat"]
SHARDS = 3


def _select(defs, names: list[str]) -> list:
    from dagster_project.commands import resolve_key

    return [resolve_key(defs, n) for n in names]


def _versions(instance, defs) -> dict[str, str]:
    from assets.common import latest_metadata
    from dagster_project.commands import resolve_key

    return {s: str(latest_metadata(instance, resolve_key(defs, f"clean_{s}"))["data_version"]) for s in SOURCES}


def test_celery_two_workers_same_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_celery()
    from dagster_project.commands import _context, execute, get_instance, observe_sources

    recipe_file = str(ROOT / "recipes" / "tiny.yaml")

    # Reference: the same sources unsharded, in process, in their own homes.
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "plain"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "plain" / "dagster"))
    recipe, defs, _ = _context(recipe_file, ["execution.executor=in_process"])
    instance = get_instance()
    observe_sources(defs, instance)
    names = [f"bench_{b}" for b in BENCHES] + [f"raw_{s}" for s in SOURCES] + [f"clean_{s}" for s in SOURCES]
    assert execute(defs, instance, recipe, _select(defs, names)).success
    expected = _versions(instance, defs)

    home = tmp_path / "celery"
    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    with redis_server(tmp_path) as broker:
        sets = ["execution.executor=celery", f"execution.celery.broker={broker}", f"execution.celery.backend={broker}",
                *[f"sources.{s}.shards={SHARDS}" for s in SOURCES]]
        # The benchmarks in process first (fewer Celery steps), then the sharded sources on the workers.
        bench_recipe, bench_defs, _ = _context(recipe_file, [*sets, "execution.executor=in_process"])
        instance = get_instance()  # writes DAGSTER_HOME/dagster.yaml before the workers read it
        observe_sources(bench_defs, instance)
        assert execute(bench_defs, instance, bench_recipe,
                       _select(bench_defs, [f"bench_{b}" for b in BENCHES])).success
        recipe, defs, _ = _context(recipe_file, sets)
        assert defs.resolve_job_def("cascade").executor_def.name == "celery"

        config_dir = celery_config(tmp_path / "celery_config", broker)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(config_dir), str(ROOT)]), "PYTHONWARNINGS": "ignore"}
        with celery_workers([f"w{i}@cascade-test" for i in (1, 2)], env, tmp_path) as workers:
            observe_sources(defs, instance)
            result = execute(defs, instance, recipe, _select(defs, [f"clean_{s}" for s in SOURCES]))
            assert result.success, [e.message for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
            assert _versions(instance, defs) == expected

            # Every shard step ran in a worker process, and both workers took some.
            shard_pids = {e.pid for e in result.all_events
                          if e.event_type_value == "STEP_START" and "_shard_" in (e.step_key or "")}
            worker_pids = {w.pid for w in workers}
            assert shard_pids <= worker_pids, (shard_pids, worker_pids)
            assert shard_pids == worker_pids, f"only {len(shard_pids)} of the 2 workers ran shards"
    assert all(p.poll() is not None for p in workers)
