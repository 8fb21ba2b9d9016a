#!/usr/bin/env bash
# Optional, never part of `make setup`/`make run`: what `storage.backend: postgres` needs
# (docs/executors.md, "Several machines: PostgreSQL + Celery").
#   - Debian's `postgresql` server (initdb, postgres, pg_ctl under /usr/lib/postgresql/*/bin),
#     installed by apt as root when missing: the database server itself, for a test or a
#     one-host setup (a cluster's workers only need the client libraries below);
#   - the `postgres` extra of pyproject (psycopg 3 for the generation and reward caches,
#     psycopg2-binary for dagster-postgres) into the venv;
#   - dagster-postgres at the release that matches the installed dagster (dagster 1.X.Y pairs
#     with the libraries 0.(X+16).Y). When that exact release is not on the registry yet, the
#     newest release of the same minor line is installed without its `dagster==` pin
#     (--no-deps), so dagster itself is never up- or downgraded here (as scripts/setup_celery.sh).
# Usage: bash scripts/setup_postgres.sh [VENV]   (or `make postgres`)
set -euo pipefail
VENV=${1:-.venv}
source "$(dirname "$0")/pip_install.sh"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql
  else
    echo "the PostgreSQL server is missing (need root to apt-get install postgresql)" >&2
    exit 1
  fi
fi
pip_install "$VENV" -e ".[postgres]"
DAGSTER=$("$VENV/bin/python" -c "import dagster; print(dagster.__version__)")
IFS=. read -r MAJOR MINOR PATCH <<<"$DAGSTER"
LIB="0.$((MINOR + 16)).$PATCH"
if ! pip_install "$VENV" --no-deps "dagster-postgres==$LIB" 2>/dev/null; then
  echo "dagster-postgres==$LIB not available; installing the newest 0.$((MINOR + 16)).x without its dagster pin" >&2
  pip_install "$VENV" --no-deps "dagster-postgres>=0.$((MINOR + 16)).0,<0.$((MINOR + 17))"
fi
"$VENV/bin/python" -c "import dagster_postgres, psycopg, psycopg2; print('postgres storage ready:', dagster_postgres.__version__, 'psycopg', psycopg.__version__)"
