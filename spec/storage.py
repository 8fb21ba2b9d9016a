"""Where a run's records live: the recipe's `storage:` block (typed, no database import).

What is stored: the Dagster instance (runs, event logs, materializations, data versions) and
the two caches (generation samples, reward scores). Files (datasets, checkpoints, evals) always
stay under `$CASCADE_HOME`, which several machines share over a network filesystem.

Two backends:

- `embedded` (the default; nothing changes for `make run`): SQLite files under
  `$CASCADE_HOME` — the instance under `dagster/`, `generation_cache/samples.sqlite`,
  `reward_cache.sqlite`. One machine only: SQLite's WAL needs shared memory between its
  writers, which a network filesystem (NFS, SMB, most FUSE mounts) does not give, so workers on
  other machines writing the same files can corrupt them.
- `postgres`: the instance (dagster-postgres) and both caches in one PostgreSQL database, whose
  URL each process reads from the environment variable named by `url_env` (never written in a
  recipe: a URL carries the password). Any number of workers on any number of machines read
  and write it at once; `$CASCADE_HOME` then holds only files.

How the choice reaches the code: `assets.build_definitions` calls `use_storage(recipe.storage)`
in every process that builds the recipe's graph (the `cascade` command, each multiprocess step,
each Celery worker step, the UI's code location). It puts the Postgres URL in
`$CASCADE_CACHE_URL` (or removes it for `embedded`), the variable the caches' default location
follows (`cache_url()`): generation.cache and rewards.cache pick their backend from that
location — a `postgresql://` URL selects PostgreSQL, a path selects SQLite. The Dagster
instance's `dagster.yaml` is written from the same block (dagster_project.commands).
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import model_validator

from spec.train import Settings

CACHE_URL_ENV = "CASCADE_CACHE_URL"
"""The variable the caches' default location follows: a `postgresql://` URL, or unset for SQLite files under the home."""
URL_SCHEMES = ("postgresql://", "postgres://")
"""What a PostgreSQL URL starts with (libpq's two spellings)."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class StorageError(ValueError):
    """The storage block cannot be used as written (bad variable name, variable unset, not a URL)."""


def is_postgres_url(location: object) -> bool:
    """True for a `postgresql://` (or `postgres://`) URL, False for a path or anything else."""
    return isinstance(location, str) and location.startswith(URL_SCHEMES)


class StorageConfig(Settings):
    """Where the Dagster instance and the generation / reward caches live (docs/executors.md)."""

    backend: Literal["embedded", "postgres"] = "embedded"
    """`embedded`: SQLite files under `$CASCADE_HOME` (the Dagster instance in `dagster/`, `generation_cache/samples.sqlite`, `reward_cache.sqlite`) — one machine only, since SQLite's WAL is not safe on a network filesystem; `postgres`: the Dagster instance (dagster-postgres) and both caches in one PostgreSQL database, so Celery (or k8s) workers on several machines can share one run while `$CASCADE_HOME` on shared storage holds only files (`make postgres` installs the client libraries)."""
    url_env: str = "CASCADE_POSTGRES_URL"
    """`postgres`: name of the environment variable holding the database URL (`postgresql://user:password@host:5432/db`), set on every machine that runs a step; the URL itself (it carries the password) never goes in a recipe. Ignored by `embedded`."""

    @model_validator(mode="after")
    def _check(self) -> "StorageConfig":
        if self.backend == "postgres":
            self.url()  # a missing or malformed URL fails when the recipe loads, not mid-run
        return self

    def url(self) -> str | None:
        """The PostgreSQL URL from `$<url_env>` (None for `embedded`); StorageError saying what is wrong."""
        if self.backend != "postgres":
            return None
        name = self.url_env
        if is_postgres_url(name) or "://" in name:
            raise StorageError("storage.url_env names an environment variable (e.g. CASCADE_POSTGRES_URL), not the "
                               "URL itself: a URL carries the password and never goes in a recipe")
        if not _ENV_NAME.match(name):
            raise StorageError(f"storage.url_env {name!r} is not an environment variable name")
        value = os.environ.get(name, "").strip()
        if not value:
            raise StorageError(f"storage.backend is postgres but ${name} is not set: export "
                               f"{name}=postgresql://USER:PASSWORD@HOST:5432/DATABASE on every machine that runs "
                               "a step (storage.url_env names the variable)")
        if not is_postgres_url(value):
            raise StorageError(f"${name} must be a postgresql:// URL (postgresql://USER:PASSWORD@HOST:5432/DATABASE)")
        return value


def use_storage(storage: StorageConfig) -> None:
    """Make `storage` this process's cache location: `$CASCADE_CACHE_URL` = its URL, or unset."""
    url = storage.url()
    if url:
        os.environ[CACHE_URL_ENV] = url
    else:
        os.environ.pop(CACHE_URL_ENV, None)


def cache_url() -> str | None:
    """The caches' shared PostgreSQL URL (`$CASCADE_CACHE_URL`), or None: SQLite files under the home."""
    value = os.environ.get(CACHE_URL_ENV, "").strip()
    if value and not is_postgres_url(value):
        raise StorageError(f"${CACHE_URL_ENV} must be a postgresql:// URL (or unset)")
    return value or None


__all__ = ["CACHE_URL_ENV", "StorageConfig", "StorageError", "cache_url", "is_postgres_url", "use_storage"]
