"""The NaN/inf guard every trainer shares: one error naming the stage, the step and where to resume.

A non-finite loss or gradient norm turns the weights into NaN on the next optimizer step; a run
that went on would then checkpoint NaN weights and rotate the last good checkpoint away. So every
trainer checks before it steps and raises `NonFiniteLossError`: the policy trainers (SFT, GRPO,
multi-domain, MOPD) through `trainer.backend_api.Backend` on every backend, the reward-model
trainer in `rewards.reward_model`. The training loop then fills in the stage (algorithm and output
folder), the step and the checkpoint to resume from.

It lives in `spec` because two layers raise it (rewards and trainer) and it needs no torch: a
loss or norm is read with `float()`, which the trainers do anyway to log it.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["NonFiniteLossError", "check_finite"]


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm became NaN/inf; the stage stopped before the optimizer step.

    Fields (each may be filled in later by `locate`): `what` ("loss", "gradient norm"), `value`,
    `step` (the optimizer step that failed, 1 = the first), `algorithm` (the trainer's: sft, grpo, mopd, ..., or reward_model),
    `stage` (the output folder the trainer was given), `checkpoint` (the last good one, if any).
    """

    def __init__(self, what: str = "loss", value: float = math.nan, step: int | None = None,
                 algorithm: str | None = None, stage: str | None = None, checkpoint: str | None = None):
        super().__init__(what, value, step, algorithm, stage, checkpoint)
        self.what, self.value, self.step = what, value, step
        self.algorithm, self.stage, self.checkpoint = algorithm, stage, checkpoint

    def locate(self, *, step: int | None = None, algorithm: str | None = None, stage: str | None = None,
               checkpoint: str | None = None) -> NonFiniteLossError:
        """Fill in where it happened (fields already set are kept); returns self, to re-raise."""
        self.step = self.step if self.step is not None else step
        self.algorithm = self.algorithm or algorithm
        self.stage = self.stage or stage
        self.checkpoint = self.checkpoint or checkpoint
        self.args = (self.what, self.value, self.step, self.algorithm, self.stage, self.checkpoint)
        return self

    def fields(self) -> dict[str, Any]:
        """The constructor's keyword arguments (JSON-safe): a DeepSpeed rank hands them to its launcher."""
        return {"what": self.what, "value": self.value, "step": self.step, "algorithm": self.algorithm,
                "stage": self.stage, "checkpoint": self.checkpoint}

    def __str__(self) -> str:
        where = f"{self.algorithm or 'training'} stage" + (f" {self.stage}" if self.stage else "")
        when = f" at step {self.step}" if self.step is not None else ""
        resume = (f"the last good checkpoint is {self.checkpoint}: rerun with --resume (resume: true) to go on from it"
                  if self.checkpoint else "no checkpoint was written yet: a rerun starts the stage over")
        return (f"{where}: non-finite {self.what} ({self.value}){when}; stopped before the optimizer step, "
                f"the weights were not updated; {resume}")


def _as_float(value: Any) -> float:
    """`value` (a float or a one-element tensor) as a float."""
    if hasattr(value, "detach"):
        value = value.detach()
    return float(value)


def check_finite(value: Any, step: int | None = None, *, what: str = "loss", algorithm: str | None = None,
                 stage: str | None = None) -> None:
    """Raise NonFiniteLossError when `value` (loss or gradient norm) is NaN or inf.

    `step` is the 0-based index of the optimizer step (the message counts from 1, as checkpoint
    folders do: the step after `checkpoints/step_2` is step 3).
    """
    number = _as_float(value)
    if not math.isfinite(number):
        raise NonFiniteLossError(what, number, None if step is None else step + 1, algorithm, stage)
