"""The Celery executor for real: redis-server and two Celery workers started by the test, the
tiny recipe's sharded curation run through them, the result equal to the in-process run.

What it needs (redis-server from Debian, dagster-celery, celery, redis) is installed by
`make celery` (scripts/setup_celery.sh) when missing, as tests/generation/vllm_env.py does
for vLLM; every process the test starts is stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["chat_sft", "math_sft"]
BENCHES = ["humaneval", "gsm8k", "eval_math", "eval_ifeval", "eval_code", "eval_swe", "eval_chat"]
SHARDS = 3


def _ensure_celery() -> None:
    """Install redis-server and the Celery executor when missing; skip with the reason when that fails."""
    def ready() -> bool:
        if shutil.which("redis-server") is None:
            return False
        probe = "import dagster_celery, celery, redis"
        return subprocess.run([sys.executable, "-W", "ignore", "-c", probe], capture_output=True).returncode == 0

    if ready():
        return
    venv = str(Path(sys.executable).parent.parent)
    try:
        done = subprocess.run(["bash", "scripts/setup_celery.sh", venv], cwd=ROOT, capture_output=True, text=True,
                              timeout=1200)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot install the Celery executor: {exc}")
    if done.returncode != 0 or not ready():
        pytest.skip(f"cannot install the Celery executor (scripts/setup_celery.sh): {done.stderr[-600:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stop one process the test started, by its PID (TERM, then KILL)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_for_redis(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "redis-server exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("redis-server did not answer PING")


def _wait_for_workers(env: dict, names: list[str], workers: list[subprocess.Popen]) -> None:
    """Until every worker answers Celery's ping (so both can take a shard when the run starts)."""
    celery = str(Path(sys.executable).parent / "celery")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert all(w.poll() is None for w in workers), "a Celery worker exited"
        done = subprocess.run([celery, "-A", "dagster_celery.app", "inspect", "ping", "--timeout", "2"],
                              env=env, capture_output=True, text=True)
        if all(n in done.stdout for n in names):
            return
        time.sleep(1)
    raise AssertionError(f"Celery workers did not come up: {done.stdout[-500:]} {done.stderr[-500:]}")


def _select(defs, names: list[str]) -> list:
    from dagster_project.commands import resolve_key

    return [resolve_key(defs, n) for n in names]


def _versions(instance, defs) -> dict[str, str]:
    from assets.common import latest_metadata
    from dagster_project.commands import resolve_key

    return {s: str(latest_metadata(instance, resolve_key(defs, f"clean_{s}"))["data_version"]) for s in SOURCES}


def test_celery_two_workers_same_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ensure_celery()
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
    port = _free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    sets = ["execution.executor=celery", f"execution.celery.broker={broker}", f"execution.celery.backend={broker}",
            *[f"sources.{s}.shards={SHARDS}" for s in SOURCES]]
    # The benchmarks in process first (fewer Celery steps), then the sharded sources on the workers.
    bench_recipe, bench_defs, _ = _context(recipe_file, [*sets, "execution.executor=in_process"])
    instance = get_instance()  # writes DAGSTER_HOME/dagster.yaml before the workers read it
    observe_sources(bench_defs, instance)
    assert execute(bench_defs, instance, bench_recipe, _select(bench_defs, [f"bench_{b}" for b in BENCHES])).success
    recipe, defs, _ = _context(recipe_file, sets)
    assert defs.resolve_job_def("cascade").executor_def.name == "celery"

    config_dir = tmp_path / "celery_config"
    config_dir.mkdir()
    (config_dir / "dagster_celery_config.py").write_text(
        f"broker_url = {broker!r}\nresult_backend = {broker!r}\nworker_prefetch_multiplier = 1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(config_dir), str(ROOT)]), "PYTHONWARNINGS": "ignore"}
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--dir", str(tmp_path)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(redis)
        _wait_for_redis(port, redis)
        names = [f"w{i}@cascade-test" for i in (1, 2)]
        for name in names:
            log = open(tmp_path / f"{name.split('@')[0]}.log", "w")
            logs.append(log)
            procs.append(subprocess.Popen(
                [str(Path(sys.executable).parent / "celery"), "-A", "dagster_celery.app", "worker", "--pool", "solo",
                 "--prefetch-multiplier", "1", "-Q", "dagster", "-n", name, "-l", "warning"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        workers = procs[1:]
        _wait_for_workers(env, names, workers)

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
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for log in logs:
            log.close()
    assert all(p.poll() is not None for p in procs)
