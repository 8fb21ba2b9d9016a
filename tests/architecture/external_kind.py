"""A stage kind, a training backend and their code, from outside the packages (a team's own module).

Importing this module registers `scaled_math`: a math RL kind with its own `options:` model, run
config and trainer, and the backend `inline`. Nothing in spec/, trainer/ or assets/ names them;
tests/architecture/test_external_stage_kind.py loads a recipe that uses both and materializes it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from spec.kinds import StageKind, register_stage_kind
from spec.train import StageOptions, StagePlace
from trainer.stage import register_backend
from trainer.config import GRPOConfig
from trainer.grpo import GRPOTrainer

BACKEND_RUNS: list[str] = []
"""Trainer classes the `inline` backend ran, in order (the test reads it)."""


class ScaledOptions(StageOptions):
    """`kind: scaled_math`: a reward scale and a reference checkpoint the trainer records."""

    reward_scale: float = Field(default=1.0, gt=0)
    """Recorded in the run summary (a real kind would scale its rewards)."""
    reference: str = "base_model"
    """An earlier checkpoint stage whose folder the trainer receives."""

    def problems(self, place: StagePlace) -> list[str]:
        return [] if self.reference in place.earlier else [f"reference: {self.reference!r} is not an earlier checkpoint"]

    def checkpoints(self) -> dict[str, str]:
        return {"reference": self.reference}

    def run_fields(self, folders: dict[str, str]) -> dict[str, Any]:
        return {"reward_scale": self.reward_scale, "reference": folders["reference"]}


class ScaledConfig(GRPOConfig):
    """GRPOConfig plus the scaled kind's fields."""

    trainer_class = f"{__name__}:ScaledTrainer"
    reward_scale: float = 1.0
    """From the options."""
    reference: str = ""
    """The reference checkpoint's folder."""


class ScaledTrainer(GRPOTrainer):
    """GRPO that reports what its kind's options gave it."""

    algorithm = "scaled_grpo"

    def summary(self) -> dict[str, Any]:
        return super().summary() | {"reward_scale": self.config.reward_scale, "reference": self.config.reference}


def run_inline(config: Any, trainer: str) -> Any:
    """Backend `inline`: the torch backend, recording which trainer it ran."""
    from trainer.backends.torch_backend import TorchBackend
    from trainer.stage import execute

    BACKEND_RUNS.append(trainer)
    return execute(config, trainer, TorchBackend)


SCALED = StageKind("scaled_math", "rl", source_domains=("math",), trainer=f"{__name__}:ScaledTrainer",
                   config=f"{__name__}:ScaledConfig", options=ScaledOptions, prompt_columns=("answer",),
                   default_rewards=("math",), eval_domain="scaled_math", eval_reward="math",
                   description="Math GRPO from a team's own module: own trainer, run config and options.")


def register() -> None:
    """The registration lines a team's code location runs before loading its recipe."""
    register_stage_kind(SCALED)
    register_backend("inline", f"{__name__}:run_inline")
