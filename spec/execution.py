"""Where a run's steps execute: the recipe's `execution:` block (typed, no Dagster import).

Executors are chosen here (or with `cascade run --set execution.executor=...`), never in code:
`assets.build_definitions` turns this block into the Dagster executor of the `cascade` job and
`cascade run` launches the run through the instance with it. The shards of a sharded source
(`sources[].shards`) are separate steps, so they run side by side under every executor but
`in_process`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from spec.train import Settings
from spec.yaml_load import BoundedDict

EXECUTORS = ("auto", "in_process", "multiprocess", "celery", "k8s")


class CeleryExecution(Settings):
    """Settings of the Celery executor (dagster-celery; `make celery` installs it and redis-server)."""

    broker: str = "redis://127.0.0.1:6379/0"
    """Celery broker URL (a Redis server started by you, e.g. `redis-server --port 6379`)."""
    backend: str = "redis://127.0.0.1:6379/0"
    """Celery result backend URL."""
    include: list[str] = Field(default_factory=list)
    """Extra modules the workers import."""
    config_source: BoundedDict = Field(default_factory=dict)
    """Extra Celery settings (e.g. `{worker_prefetch_multiplier: 1}`)."""


class ExecutionConfig(Settings):
    """How the steps of `cascade run` execute (docs/executors.md)."""

    executor: Literal[EXECUTORS] = "auto"  # type: ignore[valid-type]
    """`auto`: `multiprocess` when any source is sharded (its shards then run side by side), else `in_process` (no per-step process start-up); `in_process`; `multiprocess` (one process per step on this machine); `celery` (steps queued to Celery workers over Redis); `k8s` (one Kubernetes Job per step, dagster-k8s)."""
    max_concurrent: int | None = Field(default=None, ge=1)
    """`multiprocess`: at most this many steps at once (default: the CPU count)."""
    celery: CeleryExecution = Field(default_factory=CeleryExecution)
    """`celery` executor settings."""
    k8s: BoundedDict = Field(default_factory=dict)
    """`k8s` executor config, passed verbatim to dagster-k8s' `k8s_job_executor` (e.g. `{job_namespace: cascade, max_concurrent: 4, env_vars: [CASCADE_HOME=/data]}`); validated against its schema when the definitions load."""

    def resolved(self, sharded: bool) -> str:
        """The executor actually used: `auto` resolved for a recipe with (or without) sharded sources."""
        if self.executor == "auto":
            return "multiprocess" if sharded else "in_process"
        return self.executor
