"""The stage contract: run_sft / run_grpo(config) -> StageResult, whatever the backend.

Output folder (Hugging Face layout): model.safetensors, config.json, generation_config.json,
tokenizer files + chat template, lineage.json, metrics.parquet, tb/. `lineage.json` is written
last and marks the folder finished: a finished folder is never overwritten (the same config
returns it as is, another config is an error). An unfinished folder is resumed (`resume`) or
refused, so a crashed run is never silently clobbered.

This module is the contract only: `run_stage` dispatches through trainer.backend_registry, and
the loop shared by the torch and DeepSpeed backends is trainer.loop. Nothing here imports a
backend, so backends may import this module freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer import backend_registry
from trainer.lineage import LINEAGE_FILE, read_lineage
from trainer.metrics import METRICS_FILE


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
    """Run a stage (kind "sft" or "grpo") on the backend named by config.backend.

    A finished output_dir with the same config is returned as is; otherwise the backend's
    `run(kind, config)` from trainer.backend_registry does the work.
    """
    done = _check_output(config)
    if done is not None:
        return done
    return backend_registry.backend_runner(config.backend)(kind, config)
