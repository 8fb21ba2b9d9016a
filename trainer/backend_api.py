"""The Backend base class and what every backend shares: LR schedule, dtype, optimizer, NaN guard.

The SFT and GRPO loops are written once against `Backend`: they call `backward(loss)` per
micro-batch and `step()` once per optimizer step, and ask the backend to save or restore
model/optimizer/scheduler state. Losses are normalised by the *global* token count of the step
by the loops, so accumulation over micro-batches and ranks needs no extra scaling here
(`grad_scale()` tells the loop what DeepSpeed's rank-averaging divides by).

The NaN/inf guard is here, once for every trainer and backend: `backward` refuses a non-finite
loss before any gradient exists, and each backend's `step` refuses a non-finite gradient norm
before its optimizer touches the weights (`spec.nonfinite.NonFiniteLossError`; the loop adds the
stage, the step and the checkpoint to resume from).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from spec.nonfinite import check_finite

__all__ = ["Backend", "grad_norm", "lr_lambda", "make_optimizer", "native_bf16", "resolve_dtype"]


def lr_lambda(total_steps: int, warmup_steps: int, schedule: str = "constant", min_ratio: float = 0.0) -> Callable[[int], float]:
    """Multiplier of the peak LR at step s: linear warm-up, then constant or cosine decay."""

    def fn(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return fn


def native_bf16(device_type: str) -> bool:
    """Whether the hardware computes bf16 natively: GPUs with bf16, CPUs with AVX512-BF16 or AMX.

    Elsewhere bf16 is emulated and slower than fp32 (6x for SmolLM2-135M on an AVX2-only CPU).
    """
    import torch

    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device_type == "cpu":
        probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return any(bool(probe()) for probe in probes if probe is not None)
    return False


def resolve_dtype(name: str, device: Any) -> Any:
    """Autocast dtype for training: bf16 when asked, or where the hardware has it natively (auto)."""
    import torch

    if name == "bf16" or (name == "auto" and native_bf16(device.type)):
        return torch.bfloat16
    return None


class Backend:
    """Shared surface of the torch and DeepSpeed backends."""

    model: Any  # the unwrapped Hugging Face module (generation, saving)
    device: Any
    rank: int = 0
    world_size: int = 1
    autocast_dtype: Any = None

    @classmethod
    def build(cls, model: Any, config: Any, trainer: Any) -> "Backend":
        """This backend for one run of `trainer` (its step count and warm-up; the config's LR schedule)."""
        return cls(model, config, trainer.total_steps, trainer.warmup_steps,  # type: ignore[call-arg]
                   getattr(config, "lr_schedule", "constant"), getattr(config, "min_lr_ratio", 0.0))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def grad_scale(self) -> float:
        """Factor on a loss already normalised by the global count (DeepSpeed averages over ranks)."""
        return 1.0

    def backward(self, loss: Any, last: bool = True) -> None:
        """Accumulate the gradients of `loss`; a NaN/inf loss raises NonFiniteLossError first."""
        check_finite(loss)
        self._backward(loss, last)

    def _backward(self, loss: Any, last: bool) -> None:
        raise NotImplementedError

    def step(self) -> float:
        """Clip, apply the optimizer and scheduler, zero grads; return the pre-clip grad norm.

        A non-finite grad norm raises NonFiniteLossError with the weights left as they were.
        """
        raise NotImplementedError

    def lr(self) -> float:
        raise NotImplementedError

    def save_state(self, folder: Path) -> None:
        raise NotImplementedError

    def load_state(self, folder: Path) -> None:
        raise NotImplementedError

    def full_state_dict(self) -> dict[str, Any] | None:
        """The full model weights on the main rank (gathered under ZeRO-3); None elsewhere."""
        return self.model.state_dict() if self.is_main else None

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        return list(values)

    def gather_objects(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        return None

    def synced_rollouts(self) -> bool:
        """Whether rollout forwards must run in lockstep across ranks (ZeRO-3 gathers parameters)."""
        return False

    def close(self, aborted: bool = False) -> None:
        """Release the backend; `aborted` after a failure (other ranks may never reach a barrier)."""
        return None


def grad_norm(params: list[Any]) -> Any:
    """Total 2-norm of the gradients of `params` (a tensor; 0 when none has a gradient)."""
    import torch

    grads = [p.grad for p in params if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads, foreach=False) if grads else torch.zeros(())


def make_optimizer(model: Any, config: Any) -> Any:
    """AdamW with the paper's betas; a plain torch optimizer so DeepSpeed compiles nothing."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=config.learning_rate, betas=tuple(config.adam_betas),
                             weight_decay=config.weight_decay, eps=1e-8, foreach=False)
