"""The stage contract: run_stage(config, trainer) -> StageResult, whatever the backend.

Output folder (Hugging Face layout): model.safetensors, config.json, generation_config.json,
tokenizer files + chat template, lineage.json, metrics.parquet, tb/. `lineage.json` is written
last and marks the folder finished: a finished folder is never overwritten (the same config
returns it as is, another config is an error). An unfinished folder is resumed (`resume`) or
refused, so a crashed run is never silently clobbered.

This module is the contract only: `run_stage` dispatches through trainer.backend_registry, the
loop shared by the torch and DeepSpeed backends is trainer.loop, and the trainer it runs follows
trainer.base.Trainer. Nothing here imports a
backend, so backends may import this module freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spec.lineage import LINEAGE_FILE
from trainer import backend_registry
from trainer.config import RunFields
from trainer.lineage import read_lineage
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
    """Train `trainer` (`module:Class`, default: the config's `trainer_class`) on the backend named by
    `config.backend`.

    A finished output_dir with the same config is returned as is; otherwise the backend's
    `run(config, trainer)` from trainer.backend_registry does the work.
    """
    done = _check_output(config)
    if done is not None:
        return done
    return backend_registry.backend_runner(config.backend)(config, trainer or type(config).trainer_class)
