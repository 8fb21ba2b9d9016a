"""The Dagster instance's PostgreSQL storage as `storage.backend: postgres` configures it:
dagster-postgres' storage, talking to the database through psycopg2.

Why a subclass and not dagster.yaml's plain `storage: postgres:` block: SQLAlchemy 2.1 (what
dagster installs here) made psycopg 3 the default driver of a `postgresql://` URL, and
dagster-postgres' event log sends `NOTIFY run_events, %(notify_id)s` with every event, which
psycopg 3's server-side parameter binding rejects (`syntax error at or near "$1"`): no run
could be stored. The storage block names one libpq URL in one variable (the caches read it
with psycopg 3); this class hands the same URL to dagster-postgres as `postgresql+psycopg2://`,
so nothing else has to be configured. Its config is dagster-postgres' own (`postgres_url:
{env: ...}`), and every process that opens the instance — the launcher, each Celery worker
(from the run's instance reference), the UI — builds it from dagster.yaml, so this module must
be importable there (it is part of the project).
"""

from __future__ import annotations

from typing import Any

from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

DRIVER_SCHEME = "postgresql+psycopg2://"
"""The SQLAlchemy URL scheme dagster-postgres is given (psycopg2, which dagster-postgres is tested with)."""


def sqlalchemy_url(url: str) -> str:
    """`url` (libpq form, `postgresql://` or `postgres://`) with psycopg2 named as its driver;
    a URL that already names a driver is left as it is."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return DRIVER_SCHEME + url[len(scheme):]
    return url


class PostgresStorage(DagsterPostgresStorage):
    """dagster-postgres' run, event log and schedule storage on the storage block's URL, via psycopg2."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> "PostgresStorage":  # type: ignore[override]
        return cls(inst_data=inst_data, postgres_url=sqlalchemy_url(pg_url_from_config(config_value)),
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))
