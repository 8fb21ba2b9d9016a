"""The stage contract and the loop it runs: run_stage(config, trainer) -> StageResult, whatever the backend.

Output folder (Hugging Face layout): model.safetensors, config.json, generation_config.json,
tokenizer files + chat template, lineage.json, metrics.parquet, tb/. `lineage.json` is written
last and marks the folder finished: a finished folder is never overwritten (the same config
returns it as is, another config is an error). An unfinished folder is resumed (`resume`) or
refused, so a crashed run is never silently clobbered.

The path from a checkpoint asset to a trainer's step is this module: `run_stage` looks the
config's `backend` up in `BACKENDS`. An entry naming a trainer.backend_api.Backend subclass
(`torch`) runs `execute` here, in this process; an entry naming a function `run(config,
trainer)` runs the stage its own way (`deepspeed` starts torchrun ranks that each run `execute`;
`trl` hands GRPO to TRL). `execute` loads the tokenizer and the policy (or the latest checkpoint
when resuming), builds the trainer class the stage's kind names (`module:Class`, a
trainer.base.Trainer), attaches the backend, runs the optimizer steps with periodic checkpoints
and metrics, then writes the output folder. A NaN/inf loss or gradient norm (the backend's guard,
trainer.backend_api) stops the stage before that step's update: the error names the algorithm,
the output folder, the step and the last good checkpoint, which `resume` goes on from.

Backends are named by "module:attr" strings, imported only when a stage asks for one, so this
module imports no backend: backends depend on it, never the reverse. The recipe loader validates
every stage's `backend` against `BACKENDS` (`backend_algorithms()`), so one registered from your
own code (`register_backend("mine", "my_package.my_backend:MyBackend")`) is a valid `backend:`.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from spec.entry_points import check_target, import_target
from spec.lineage import LINEAGE_FILE, write_record
from spec.nonfinite import NonFiniteLossError
from trainer.base import Trainer
from trainer.config import RunFields
from trainer.lineage import build_lineage, read_lineage
from trainer.metrics import METRICS_FILE, MetricsWriter, format_line

if TYPE_CHECKING:
    from trainer.backend_api import Backend

BACKENDS: dict[str, str] = {
    "torch": "trainer.backends.torch_backend:TorchBackend",
    "deepspeed": "trainer.backends.deepspeed_backend:run",
    "trl": "trainer.backends.trl_adapter:run",
}
"""Backend name -> a Backend subclass (run by `execute` in this process) or a `run(config, trainer)` function."""

ALGORITHMS: dict[str, tuple[str, ...]] = {"deepspeed": ("sft", "grpo"), "trl": ("grpo",)}
"""Trainer algorithms (trainer.base.Trainer.algorithm) a backend runs, where it runs only some; absent = all."""


def register_backend(name: str, entry_point: str, algorithms: Sequence[str] | None = None) -> None:
    """Make `backend: name` run `entry_point` ("package.module:BackendClass" or "package.module:run"), for
    every trainer algorithm or only `algorithms`; replaces an existing name."""
    BACKENDS[name] = check_target(entry_point)
    if algorithms is None:
        ALGORITHMS.pop(name, None)
    else:
        ALGORITHMS[name] = tuple(algorithms)


def backend_algorithms() -> dict[str, tuple[str, ...] | None]:
    """Every registered backend -> the algorithms it runs (None = all): what the recipe loader checks `backend` against."""
    return {name: ALGORITHMS.get(name) for name in BACKENDS}


@dataclass
class StageResult:
    """Where a finished stage put its outputs."""

    output_dir: Path
    metrics_path: Path
    lineage_path: Path
    summary: dict[str, Any] = field(default_factory=dict)


class OutputExistsError(ValueError):
    """output_dir holds a finished stage with another config, or an unfinished run without resume."""


def result_for(output_dir: str | Path) -> StageResult:
    out = Path(output_dir)
    lineage = read_lineage(out) or {}
    return StageResult(out, out / METRICS_FILE, out / LINEAGE_FILE, lineage.get("summary", {}))


def _check_output(config: RunFields) -> StageResult | None:
    """The existing result for the same config, None to proceed; raise on conflicts."""
    out = Path(config.output_dir)
    existing = read_lineage(out)
    if existing is not None:
        if existing.get("config_hash") == config.config_hash():
            return result_for(out)
        raise OutputExistsError(f"{out} already holds a finished stage with a different config "
                                f"(hash {existing.get('config_hash')}); choose another output_dir")
    if out.exists() and any(out.iterdir()) and not config.resume:
        raise OutputExistsError(f"{out} holds an unfinished run; rerun with resume (--resume) or remove it")
    return None


def run_stage(config: RunFields, trainer: str | None = None) -> StageResult:
    """Train `trainer` (`module:Class`, default: the config's `trainer_class`) on the backend `config.backend`
    names; a finished output_dir with the same config is returned as is."""
    done = _check_output(config)
    if done is not None:
        return done
    if config.backend not in BACKENDS:
        raise ValueError(f"unknown backend {config.backend!r}; known backends: {', '.join(sorted(BACKENDS))}")
    trainer = trainer or type(config).trainer_class
    runner: type[Backend] | Callable[[RunFields, str], StageResult] = import_target(BACKENDS[config.backend])
    if isinstance(runner, type):  # a Backend subclass: the shared loop, here
        return execute(config, trainer, runner)
    return runner(config, trainer)


def build_trainer(trainer_class: str, config: RunFields, tokenizer: Any, world_size: int, rank: int) -> Trainer:
    """An instance of the trainer class `trainer_class` (`module:Class`) names."""
    return import_target(trainer_class)(config, tokenizer, world_size=world_size, rank=rank)


def execute(config: RunFields, trainer_class: str, backend_class: type[Backend],
            world_size: int = 1, rank: int = 0) -> StageResult:
    """The loop shared by every in-process backend and every DeepSpeed rank: load, resume, steps,
    checkpoints, the output folder and, last, lineage.json (see the module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.checkpointing import latest_checkpoint, load_checkpoint, save_checkpoint, save_model_folder, seed_everything

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(config.seed, config.deterministic)
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    ckpt = latest_checkpoint(out) if config.resume else None
    tokenizer = AutoTokenizer.from_pretrained(config.policy)
    model = AutoModelForCausalLM.from_pretrained(ckpt / "model" if ckpt else config.policy, dtype=torch.float32)
    trainer = build_trainer(trainer_class, config, tokenizer, world_size, rank)
    algorithm = trainer.algorithm
    backend = backend_class.build(model, config, trainer)
    trainer.attach(backend)
    metrics = MetricsWriter(out, config.tensorboard, enabled=backend.is_main, tracking=config.tracking)
    start = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt, backend)
        trainer.load_state_dict(state)
        start = int(state["step"])
        metrics.resume_from(start)
        if backend.is_main:
            print(f"[{algorithm}] resumed from {ckpt}", file=sys.stderr)
    finished = False
    try:
        for step in range(start, trainer.total_steps):
            try:
                values = trainer.train_step(step)
            except NonFiniteLossError as err:
                last = latest_checkpoint(out)
                err.locate(step=step + 1, algorithm=algorithm, stage=str(out), checkpoint=str(last) if last else None)
                raise
            metrics.log(step, values)
            if backend.is_main and (step % config.log_every == 0 or step + 1 == trainer.total_steps):
                print(f"[{algorithm}] " + format_line(step, trainer.total_steps, values, trainer.progress_keys),
                      file=sys.stderr, flush=True)
            if config.save_steps and (step + 1) % config.save_steps == 0 and step + 1 < trainer.total_steps:
                metrics.flush()
                save_checkpoint(out, step + 1, backend, tokenizer, trainer.state_dict(), config.keep_checkpoints)
        save_model_folder(out, backend, tokenizer)
        metrics.close()
        summary = {"steps": trainer.total_steps, "resumed_from_step": start or None, **trainer.summary()}
        if metrics.rows:
            summary["final_metrics"] = {k: v for k, v in metrics.rows[-1].items() if isinstance(v, float)}
        if backend.is_main:
            rewards = trainer.reward_records() if hasattr(trainer, "reward_records") else None
            write_record(out, build_lineage(config, algorithm, rewards=rewards, summary=summary))
            shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the finished stage supersedes them
        backend.barrier()
        finished = True
    finally:
        if callable(close := getattr(trainer, "close", None)):
            close()
        backend.close(aborted=not finished)
    return result_for(out)
