"""The recipe's `storage:` block: validated at load with messages that say what to do, and the
Dagster instance's dagster.yaml written from it — PostgreSQL storage from an environment
variable (never a URL in a file), and a home that already keeps its history in the other
backend refused instead of silently starting a second history."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dagster_project.commands import InstanceStorageError, ensure_instance_config, sqlite_history
from dagster_project.recipe import parse_recipe
from spec.paths import REPO_ROOT
from spec.recipe import RecipeError
from spec.storage import CACHE_URL_ENV, StorageConfig, StorageError, cache_url, use_storage

URL = "postgresql://cascade:secret@db.internal:5432/cascade"


@pytest.fixture(scope="module")
def tiny_data() -> dict:
    return yaml.safe_load((REPO_ROOT / "recipes" / "tiny.yaml").read_text())


def _error(data: dict) -> str:
    with pytest.raises(RecipeError) as info:
        parse_recipe(data)
    return str(info.value)


def test_default_is_embedded_and_needs_nothing(tiny_data: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CASCADE_POSTGRES_URL", raising=False)
    recipe = parse_recipe(copy.deepcopy(tiny_data))
    assert recipe.storage == StorageConfig() and recipe.storage.backend == "embedded" and recipe.storage.url() is None


def test_postgres_block_validated_at_load(tiny_data: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    data = copy.deepcopy(tiny_data)
    data["storage"] = {"backend": "postgres"}
    monkeypatch.delenv("CASCADE_POSTGRES_URL", raising=False)
    message = _error(data)
    assert "storage" in message and "$CASCADE_POSTGRES_URL is not set" in message
    monkeypatch.setenv("CASCADE_POSTGRES_URL", "mysql://x@y/z")
    assert "must be a postgresql:// URL" in _error(data)
    monkeypatch.setenv("CASCADE_POSTGRES_URL", URL)
    assert parse_recipe(data).storage.url() == URL
    data["storage"] = {"backend": "postgres", "url_env": URL}  # a URL where a variable name belongs
    message = _error(data)
    assert "not the URL itself" in message and "secret" not in message
    data["storage"] = {"backend": "postgres", "url_env": "MY-URL"}
    assert "not an environment variable name" in _error(data)
    data["storage"] = {"backend": "sqlite"}
    assert "storage.backend" in _error(data)
    data["storage"] = {"backend": "postgres", "url": URL}  # no field takes a URL
    assert "storage.url" in _error(data)


def test_use_storage_sets_the_cache_location(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_FOR_TEST", URL)
    monkeypatch.delenv(CACHE_URL_ENV, raising=False)
    use_storage(StorageConfig(backend="postgres", url_env="PG_FOR_TEST"))
    assert cache_url() == URL
    use_storage(StorageConfig())
    assert cache_url() is None
    monkeypatch.setenv(CACHE_URL_ENV, "/some/path")
    with pytest.raises(StorageError):
        cache_url()


def _config(home: Path) -> dict:
    return yaml.safe_load((home / "dagster.yaml").read_text())


def test_postgres_instance_config_written_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_POSTGRES_URL", URL)
    storage = StorageConfig(backend="postgres")
    ensure_instance_config(tmp_path, storage)
    ensure_instance_config(tmp_path, storage)  # idempotent
    config = _config(tmp_path)
    assert config["storage"] == {"custom": {"module": "dagster_project.pg_storage", "class": "PostgresStorage",
                                            "config": {"postgres_url": {"env": "CASCADE_POSTGRES_URL"}}}}
    assert config["telemetry"] == {"enabled": False} and config["nux"] == {"enabled": False}
    assert "secret" not in (tmp_path / "dagster.yaml").read_text()  # the URL stays in the environment
    from tests.e2e.servers import ensure_postgres

    ensure_postgres()  # dagster-postgres, which pg_storage imports, is installed on first use (make postgres)
    from dagster_project.pg_storage import sqlalchemy_url

    assert sqlalchemy_url(URL) == URL.replace("postgresql://", "postgresql+psycopg2://")
    ensure_instance_config(tmp_path)  # no recipe (make ui): the file is left as it is
    assert _config(tmp_path) == config
    # This home is PostgreSQL now: an embedded recipe, or another variable, is refused.
    with pytest.raises(InstanceStorageError, match="PostgreSQL, but the recipe's storage.backend is embedded"):
        ensure_instance_config(tmp_path, StorageConfig())
    monkeypatch.setenv("OTHER_URL", URL)
    with pytest.raises(InstanceStorageError, match="already has a `storage:` block"):
        ensure_instance_config(tmp_path, StorageConfig(backend="postgres", url_env="OTHER_URL"))


def test_sqlite_home_switched_to_postgres_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    home = tmp_path / "dagster"
    ensure_instance_config(home, StorageConfig())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dg.DagsterInstance.get()  # SQLite storages created: this home has a history now

    @dg.op
    def one() -> int:
        return 1

    @dg.job
    def tiny_job() -> None:
        one()

    assert tiny_job.execute_in_process(instance=instance).success
    instance.dispose()
    assert sqlite_history(home)
    before = (home / "dagster.yaml").read_text()
    monkeypatch.setenv("CASCADE_POSTGRES_URL", URL)
    with pytest.raises(InstanceStorageError, match="already keeps its run history in SQLite") as info:
        ensure_instance_config(home, StorageConfig(backend="postgres"))
    assert "new CASCADE_HOME" in str(info.value)
    assert (home / "dagster.yaml").read_text() == before  # nothing written


def test_instance_on_a_real_postgres_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The written dagster.yaml opens for real: a run and its events are rows in PostgreSQL, and
    nothing is kept in SQLite under the home."""
    from dagster_project.commands import get_instance
    from tests.e2e.servers import postgres_server

    home = tmp_path / "dagster"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with postgres_server() as server:
        url = server.create_database("instance")
        monkeypatch.setenv("CASCADE_POSTGRES_URL", url)
        import dagster as dg
        import psycopg

        instance = get_instance(StorageConfig(backend="postgres"))
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"

        @dg.op
        def one() -> int:
            return 1

        @dg.job
        def tiny_job() -> None:
            one()

        result = tiny_job.execute_in_process(instance=instance)
        assert result.success
        instance.dispose()
        with psycopg.connect(url) as db:
            assert db.execute("SELECT run_id FROM runs").fetchall() == [(result.run_id,)]
            events = db.execute("SELECT count(*) FROM event_logs WHERE run_id = %s", (result.run_id,)).fetchone()[0]
        assert events > 0
    assert not sqlite_history(home) and not list(home.rglob("*.db"))
