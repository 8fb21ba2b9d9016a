"""Suite-wide settings: offline model loading, an isolated CASCADE_HOME, shared fixtures."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


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
