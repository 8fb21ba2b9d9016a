"""The training loop shared by every backend and rank: resume, steps, checkpoints, final outputs.

`execute(config, trainer, make_backend)` loads the tokenizer and the policy (or the latest
checkpoint when resuming), builds the trainer class `trainer` names (`module:Class`, a
trainer.base.Trainer), attaches the backend that `make_backend(model, trainer)` returns, runs the
optimizer steps with periodic checkpoints and metrics, then writes the output folder and, last,
lineage.json. The torch backend runs it in one process; every DeepSpeed rank runs it under
torchrun. A NaN/inf loss or gradient norm (the backend's guard, trainer.backend_api) stops the
stage before that step's update: the error names the algorithm, the output folder, the step and
the last good checkpoint, which `resume` goes on from.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from spec.entry_points import import_target
from spec.lineage import write_record
from spec.nonfinite import NonFiniteLossError
from trainer.lineage import build_lineage
from trainer.metrics import MetricsWriter, format_line
from trainer.base import Trainer
from trainer.config import RunFields
from trainer.stage import StageResult, result_for


def build_trainer(trainer_class: str, config: RunFields, tokenizer: Any, world_size: int, rank: int) -> Trainer:
    """An instance of the trainer class `trainer_class` (`module:Class`) names."""
    return import_target(trainer_class)(config, tokenizer, world_size=world_size, rank=rank)


def execute(config: RunFields, trainer_class: str, make_backend: Callable[[Any, Trainer], Any],
            world_size: int = 1, rank: int = 0) -> StageResult:
    """The loop shared by every backend and rank: resume, steps, checkpoints, final outputs."""
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
    backend = make_backend(model, trainer)
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
        backend.close(aborted=not finished)
    return result_for(out)
