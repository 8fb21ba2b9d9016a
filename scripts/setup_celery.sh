#!/usr/bin/env bash
# Optional, never part of `make setup`/`make run`: what the Celery and Kubernetes executors need.
#   - redis-server from Debian (the Celery broker and result backend), installed by apt as root;
#   - the `celery` and `k8s` extras of pyproject (celery, redis, kubernetes) into the venv;
#   - dagster-celery and dagster-k8s at the release that matches the installed dagster
#     (dagster 1.X.Y pairs with the libraries 0.(X+16).Y). When that exact release is not on
#     the registry yet, the newest release of the same minor line is installed without its
#     `dagster==` pin (--no-deps), so dagster itself is never up- or downgraded here.
# Usage: bash scripts/setup_celery.sh [VENV]   (or `make celery`)
set -euo pipefail
VENV=${1:-.venv}
source "$(dirname "$0")/pip_install.sh"
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server
  else
    echo "redis-server missing (need root to apt-get install it)" >&2
    exit 1
  fi
fi
pip_install "$VENV" -e ".[celery,k8s]"
DAGSTER=$("$VENV/bin/python" -c "import dagster; print(dagster.__version__)")
IFS=. read -r MAJOR MINOR PATCH <<<"$DAGSTER"
LIB="0.$((MINOR + 16)).$PATCH"
for pkg in dagster-celery dagster-k8s; do
  if ! pip_install "$VENV" --no-deps "$pkg==$LIB" 2>/dev/null; then
    echo "$pkg==$LIB not available; installing the newest 0.$((MINOR + 16)).x without its dagster pin" >&2
    pip_install "$VENV" --no-deps "$pkg>=0.$((MINOR + 16)).0,<0.$((MINOR + 17))"
  fi
done
"$VENV/bin/python" -c "import dagster_celery, dagster_k8s, redis, celery; print('celery executor ready:', dagster_celery.__version__)"
