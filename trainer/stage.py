"""The stage contract: run_sft / run_grpo(config) -> StageResult, whatever the backend.

Output folder (Hugging Face layout): model.safetensors, config.json, generation_config.json,
tokenizer files + chat template, lineage.json, metrics.parquet, tb/. `lineage.json` is written
last and marks the folder finished: a finished folder is never overwritten (the same config
returns it as is, another config is an error). An unfinished folder is resumed (`resume`) or
refused, so a crashed run is never silently clobbered.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trainer.lineage import LINEAGE_FILE, build_lineage, read_lineage, write_lineage
from trainer.metrics import METRICS_FILE, MetricsWriter, format_line


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


def _check_output(config: Any) -> StageResult | None:
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


def run_sft(config: Any) -> StageResult:
    """Supervised fine-tuning stage (config: SFTConfig)."""
    return run_stage("sft", config)


def run_grpo(config: Any) -> StageResult:
    """GRPO stage (config: GRPOConfig)."""
    return run_stage("grpo", config)


def run_stage(kind: str, config: Any) -> StageResult:
    done = _check_output(config)
    if done is not None:
        return done
    if config.backend == "trl":
        if kind != "grpo":
            raise ValueError("backend 'trl' is available for GRPO stages only")
        from trainer.backends.trl_adapter import run_grpo_trl

        return run_grpo_trl(config)
    if config.backend == "deepspeed":
        from trainer.backends.deepspeed_backend import launch

        launch(kind, config)
        return result_for(config.output_dir)
    from trainer.backends.torch_backend import TorchBackend

    def make(model: Any, trainer: Any) -> Any:
        schedule = getattr(config, "lr_schedule", "constant")
        return TorchBackend(model, config, trainer.total_steps, trainer.warmup_steps, schedule,
                            getattr(config, "min_lr_ratio", 0.0))

    return execute(kind, config, make)


def _make_trainer(kind: str, config: Any, tokenizer: Any, world_size: int, rank: int) -> Any:
    if kind == "sft":
        from trainer.sft import SFTTrainer

        return SFTTrainer(config, tokenizer, world_size=world_size, rank=rank)
    from trainer.grpo import GRPOTrainer

    return GRPOTrainer(config, tokenizer, world_size=world_size, rank=rank)


def execute(kind: str, config: Any, make_backend: Callable[[Any, Any], Any],
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
    trainer = _make_trainer(kind, config, tokenizer, world_size, rank)
    backend = make_backend(model, trainer)
    trainer.attach(backend)
    metrics = MetricsWriter(out, config.tensorboard, enabled=backend.is_main)
    start = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt, backend)
        trainer.load_state_dict(state)
        start = int(state["step"])
        metrics.resume_from(start)
        if backend.is_main:
            print(f"[{kind}] resumed from {ckpt}", file=sys.stderr)
    try:
        for step in range(start, trainer.total_steps):
            values = trainer.train_step(step)
            metrics.log(step, values)
            if backend.is_main and (step % config.log_every == 0 or step + 1 == trainer.total_steps):
                print(f"[{kind}] " + format_line(step, trainer.total_steps, values, trainer.progress_keys),
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
            write_lineage(out, build_lineage(config, kind, rewards=rewards, summary=summary))
            shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the finished stage supersedes them
        backend.barrier()
    finally:
        backend.close()
    return result_for(out)
