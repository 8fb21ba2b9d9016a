"""Servers the tests start for real, each one a process the test owns by PID: PostgreSQL,
redis-server and Celery workers — one piece of code for all (tests/e2e/test_celery.py,
test_multi_machine.py, the PostgreSQL cache tests).

What they need is installed on first use when missing (`make celery` / `make postgres`, i.e.
scripts/setup_celery.sh / setup_postgres.sh: Debian packages by apt as root, the optional
extras into the venv), never by the default install; a test skips, saying why, when that fails.
Installs hold one machine-wide lock (`install_lock`, also taken for `.venv-vllm` by
tests/generation/vllm_env.py): under pytest-xdist two workers may need one at once, and apt-get
(dpkg's lock) or two pip runs into one venv must not overlap; the second waits, then finds it done.

PostgreSQL refuses to run as root, so as root the cluster (data folder, unix-socket folder) is
made in a fresh folder under the system temp dir owned by the unprivileged `postgres` user, and
`initdb` / `postgres` run as that user; it listens on a free TCP port on 127.0.0.1 only, with a
password (scram-sha-256) like a real deployment. Every `stop` is SIGTERM/SIGINT, a wait, then
SIGKILL on failure; the folders are removed afterwards.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
PG_USER, PG_PASSWORD = "cascade", "cascade-test-pw"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Stop one process the test started, by its PID: `sig`, a wait, then SIGKILL."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextmanager
def install_lock() -> Iterator[None]:
    """Held while a test installs something (apt-get, pip into a venv): one installer at a time on
    this machine, whichever pytest process (xdist worker) runs it; released when the process dies."""
    with open(Path(tempfile.gettempdir()) / "cascade-tests-install.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _install(ready, script: str, what: str) -> None:
    """Run `scripts/<script>` when `ready()` is false; skip the test, saying why, when that fails."""
    if ready():
        return
    with install_lock():
        if ready():  # another worker installed it while this one waited
            return
        venv = str(Path(sys.executable).parent.parent)
        try:
            done = subprocess.run(["bash", f"scripts/{script}", venv], cwd=ROOT, capture_output=True, text=True,
                                  timeout=1200)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot install {what}: {exc}")
        if done.returncode != 0 or not ready():
            pytest.skip(f"cannot install {what} (scripts/{script}): {done.stderr[-600:]}")


def _imports(probe: str) -> bool:
    return subprocess.run([sys.executable, "-W", "ignore", "-c", f"import {probe}"], capture_output=True).returncode == 0


def ensure_celery() -> None:
    """redis-server and the Celery executor (`make celery`), installed when missing."""
    _install(lambda: shutil.which("redis-server") is not None and _imports("dagster_celery, celery, redis"),
             "setup_celery.sh", "the Celery executor")


def ensure_postgres() -> None:
    """The PostgreSQL server, dagster-postgres and psycopg (`make postgres`), installed when missing."""
    _install(lambda: bool(sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb")))
             and _imports("dagster_postgres, psycopg, psycopg2"), "setup_postgres.sh", "PostgreSQL storage")


# -- PostgreSQL ---------------------------------------------------------------------------------

@dataclass
class Postgres:
    """A running server: its process, port and admin URL (database `postgres`)."""

    proc: subprocess.Popen
    port: int
    folder: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _as_postgres_user() -> dict:
    """subprocess arguments that run a command as the unprivileged `postgres` user when we are root."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": pwd.getpwnam("postgres").pw_gid, "extra_groups": []}


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    """initdb + postgres on a free port of 127.0.0.1, stopped by PID (fast shutdown) on exit."""
    ensure_postgres()
    bin_dir = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))[-1].parent
    folder = Path(tempfile.mkdtemp(prefix="cascade-pg-"))
    as_user = _as_postgres_user()
    if as_user:
        entry = pwd.getpwnam("postgres")
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    data, sockets, pwfile = folder / "data", folder / "sockets", folder / "pw"
    proc = None
    log = None
    try:
        pwfile.write_text(PG_PASSWORD + "\n")
        if as_user:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        done = subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER, f"--pwfile={pwfile}",
                               "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-locale"],
                              capture_output=True, text=True, cwd=folder, **as_user)
        assert done.returncode == 0, f"initdb failed: {done.stderr[-1500:]}"
        subprocess.run(["mkdir", str(sockets)], check=True, **as_user)
        port = free_port()
        log = open(folder / "postgres.log", "w")
        if as_user:
            os.chown(folder / "postgres.log", pwd.getpwnam("postgres").pw_uid, -1)
        # fsync off: a test server's crash safety is not under test (the caches' own is, on SQLite).
        proc = subprocess.Popen([str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1",
                                 "-k", str(sockets), "-c", "fsync=off", "-c", "max_connections=200"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=folder, **as_user)
        server = Postgres(proc, port, folder)
        _wait_for_postgres(server)
        yield server
    finally:
        if proc is not None:
            stop(proc, signal.SIGINT)  # SIGINT: "fast" shutdown (rolls back open sessions)
        if log is not None:
            log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_for_postgres(server: Postgres) -> None:
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        assert server.proc.poll() is None, f"postgres exited: {(server.folder / 'postgres.log').read_text()[-1500:]}"
        try:
            with psycopg.connect(server.url(), connect_timeout=2):
                return
        except psycopg.OperationalError as err:
            if time.monotonic() > deadline:
                raise AssertionError(f"postgres did not accept connections: {err}") from err
            time.sleep(0.2)


# -- Redis and Celery ---------------------------------------------------------------------------

@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """redis-server on a free port of 127.0.0.1 (no persistence); yields its URL, stopped by PID."""
    ensure_celery()
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(folder)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "redis-server exited"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "redis-server did not answer PING"
            time.sleep(0.2)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(proc)


def celery_config(folder: Path, broker: str) -> Path:
    """A folder holding `dagster_celery_config.py` for `broker` (put it on the workers' PYTHONPATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dagster_celery_config.py").write_text(
        f"broker_url = {broker!r}\nresult_backend = {broker!r}\nworker_prefetch_multiplier = 1\n")
    return folder


@contextmanager
def celery_workers(names: list[str], env: dict, logs: Path, cwds: list[Path] | None = None
                   ) -> Iterator[list[subprocess.Popen]]:
    """One Celery worker process per name (solo pool, queue `dagster`), each in its own working
    directory when `cwds` is given; yields them once every one answers Celery's ping."""
    celery = str(Path(sys.executable).parent / "celery")
    procs: list[subprocess.Popen] = []
    files = []
    try:
        for i, name in enumerate(names):
            out = open(logs / f"{name.split('@')[0]}.log", "w")
            files.append(out)
            procs.append(subprocess.Popen(
                [celery, "-A", "dagster_celery.app", "worker", "--pool", "solo", "--prefetch-multiplier", "1",
                 "-Q", "dagster", "-n", name, "-l", "warning"],
                cwd=cwds[i] if cwds else ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 180
        while True:
            assert all(w.poll() is None for w in procs), "a Celery worker exited"
            done = subprocess.run([celery, "-A", "dagster_celery.app", "inspect", "ping", "--timeout", "2"],
                                  env=env, capture_output=True, text=True)
            if all(n in done.stdout for n in names):
                break
            assert time.monotonic() < deadline, f"Celery workers did not come up: {done.stdout[-500:]}"
            time.sleep(1)
        yield procs
    finally:
        for proc in reversed(procs):
            stop(proc)
        for out in files:
            out.close()
