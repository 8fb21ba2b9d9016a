"""Suite-wide settings: offline model loading, an isolated CASCADE_HOME, shared fixtures, and
what running on several pytest-xdist workers needs (`make test`: `-n auto --dist loadfile`).

Under xdist each worker is its own pytest process taking whole test files (a module's fixtures,
such as the materialized tiny home of tests/e2e/test_cascade.py, run once), so:
- torch gets one intra-op thread per worker (OMP_NUM_THREADS, unless already set, inherited by
  the CLI and training subprocesses the tests start): n workers on n cores, none spin-waiting
  for a core another worker holds;
- files holding a slow test go to the workers first (the longest jobs first keeps one worker
  from finishing an end-to-end file alone at the end while the other idles); a file's own test
  order is kept;
- ports are free ones picked per server, folders come from tmp_path (per worker), and installs
  of optional engines hold tests/e2e/servers.py's install lock.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # read when torch starts, so before any import of it

import pytest  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: files with a slow test first (stable sort: the rest keeps its order)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(scope="session")
def cascade_home(tmp_path_factory: pytest.TempPathFactory):
    """A private CASCADE_HOME so tests never touch the user's .cascade/."""
    home = tmp_path_factory.mktemp("cascade_home")
    old = os.environ.get("CASCADE_HOME")
    os.environ["CASCADE_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("CASCADE_HOME", None)
    else:
        os.environ["CASCADE_HOME"] = old


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random causal LM with a locally trained ChatML tokenizer (unit tests only)."""
    from trainer.models import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny_model") / "model", seed=0)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the whole session (tests/e2e/servers.py: installed on first use,
    started as the unprivileged `postgres` user, stopped by PID); tests create their own databases."""
    from tests.e2e.servers import postgres_server

    with postgres_server() as server:
        yield server
