"""Backend registry: the name in a stage config's `backend` field -> the function that runs the stage.

Entries are "module:function" strings, imported only when a stage asks for that backend, so this
module (and trainer.stage, which dispatches through it) imports no backend module: backends
depend on trainer.stage / trainer.loop, never the reverse. The recipe loader validates every
stage's `backend` against this registry (dagster_project.recipe passes `backend_algorithms()`), so
a backend registered from your own code is a valid `backend:` value as soon as it is registered.

Adding a backend:
  1. write one module with `run(config, trainer) -> StageResult` (`trainer`: the `module:Class` of
     the trainer.base.Trainer to run; trainer.stage has already refused to overwrite a finished
     output_dir). Most backends build a `trainer.backend_api.Backend` subclass and hand it to
     `trainer.loop.execute`, as trainer/backends/torch_backend.py does;
  2. register it with one line, here in BACKENDS or from your own code:
       register_backend("mine", "my_package.my_backend:run")
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from spec.entry_points import check_target, import_target

StageRunner = Callable[[Any, str], Any]
"""`run(config, trainer) -> trainer.stage.StageResult` (not imported: the stage contract imports this module)."""

BACKENDS: dict[str, str] = {
    "torch": "trainer.backends.torch_backend:run",
    "deepspeed": "trainer.backends.deepspeed_backend:run",
    "trl": "trainer.backends.trl_adapter:run",
}

ALGORITHMS: dict[str, tuple[str, ...]] = {"deepspeed": ("sft", "grpo"), "trl": ("grpo",)}
"""Trainer algorithms (trainer.base.Trainer.algorithm) a backend runs, where it runs only some; absent = all."""


def register_backend(name: str, entry_point: str, algorithms: Sequence[str] | None = None) -> None:
    """Make `backend: name` run `entry_point` ("package.module:function"), for every trainer algorithm or
    only `algorithms`; replaces an existing name."""
    BACKENDS[name] = check_target(entry_point)
    if algorithms is None:
        ALGORITHMS.pop(name, None)
    else:
        ALGORITHMS[name] = tuple(algorithms)


def backend_algorithms() -> dict[str, tuple[str, ...] | None]:
    """Every registered backend -> the algorithms it runs (None = all): what the recipe loader checks `backend` against."""
    return {name: ALGORITHMS.get(name) for name in BACKENDS}


def backend_runner(name: str) -> StageRunner:
    """The `run(config, trainer) -> StageResult` function of backend `name`, imported now."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(sorted(BACKENDS))}")
    return import_target(BACKENDS[name])
