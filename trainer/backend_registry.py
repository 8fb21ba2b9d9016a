"""Backend registry: the name in a stage config's `backend` field -> the function that runs the stage.

Entries are "module:function" strings, imported only when a stage asks for that backend, so this
module (and trainer.stage, which dispatches through it) imports no backend module: backends
depend on trainer.stage / trainer.loop, never the reverse.

Adding a backend:
  1. write one module with `run(kind: str, config) -> StageResult` (kind is "sft" or "grpo";
     trainer.stage has already refused to overwrite a finished output_dir). Most backends build a
     `trainer.backend_api.Backend` subclass and hand it to `trainer.loop.execute`, as
     trainer/backends/torch_backend.py does;
  2. register it with one line, here in BACKENDS or from your own code:
       register_backend("mine", "my_package.my_backend:run")
A new name must also be accepted by the `backend` field of the stage configs (trainer/config.py).
"""

from __future__ import annotations

from typing import Any, Callable

from spec.entry_points import check_target, import_target

StageRunner = Callable[[str, Any], Any]
"""`run(kind, config) -> trainer.stage.StageResult` (not imported: the stage contract imports this module)."""

BACKENDS: dict[str, str] = {
    "torch": "trainer.backends.torch_backend:run",
    "deepspeed": "trainer.backends.deepspeed_backend:run",
    "trl": "trainer.backends.trl_adapter:run",
}


def register_backend(name: str, entry_point: str) -> None:
    """Make `backend: name` run `entry_point` ("package.module:function"); replaces an existing name."""
    BACKENDS[name] = check_target(entry_point)


def backend_runner(name: str) -> StageRunner:
    """The `run(kind, config) -> StageResult` function of backend `name`, imported now."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(sorted(BACKENDS))}")
    return import_target(BACKENDS[name])
