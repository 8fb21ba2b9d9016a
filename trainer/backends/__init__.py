"""Training backends: what differs between one torch process and DeepSpeed ZeRO ranks.

The SFT and GRPO loops are written once against `Backend`: they call `backward(loss)` per
micro-batch and `step()` once per optimizer step, and ask the backend to save or restore
model/optimizer/scheduler state. Losses are normalised by the *global* token count of the step
by the loops, so accumulation over micro-batches and ranks needs no extra scaling here
(`grad_scale()` tells the loop what DeepSpeed's rank-averaging divides by).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable


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

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def grad_scale(self) -> float:
        """Factor on a loss already normalised by the global count (DeepSpeed averages over ranks)."""
        return 1.0

    def backward(self, loss: Any, last: bool = True) -> None:
        raise NotImplementedError

    def step(self) -> float:
        """Clip, apply the optimizer and scheduler, zero grads; return the pre-clip grad norm."""
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

    def close(self) -> None:
        return None


class NonFiniteLossError(RuntimeError):
    """The loss became NaN/inf: the stage stops before the optimizer step, keeping the last checkpoint."""


def check_finite(loss: Any, step: int) -> None:
    import torch

    if not bool(torch.isfinite(loss.detach()).all()):
        raise NonFiniteLossError(f"non-finite loss ({float(loss.detach())}) at step {step + 1}; stopping before "
                                 "the optimizer step. The last good checkpoint is kept under checkpoints/.")


def make_optimizer(model: Any, config: Any) -> Any:
    """AdamW with the paper's betas; a plain torch optimizer so DeepSpeed compiles nothing."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=config.learning_rate, betas=tuple(config.adam_betas),
                             weight_decay=config.weight_decay, eps=1e-8, foreach=False)


def build_batch(rows: list[list[tuple[list[int], list[bool]]]], pad_id: int) -> dict[str, Any]:
    """Collate rows of segments (token ids, target mask) into a right-padded batch.

    Each row may hold several segments (packing): attention stays inside a segment through a
    4D block-diagonal causal mask and positions restart at 0 per segment. `select[b, t]` marks
    positions whose *next* token is a training target (its id is `targets[b, t]`).
    """
    import torch

    width = max(sum(len(ids) for ids, _ in row) for row in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    positions = torch.zeros((n, width), dtype=torch.long)
    segment = torch.full((n, width), -1, dtype=torch.long)
    target_mask = torch.zeros((n, width), dtype=torch.bool)
    for b, row in enumerate(rows):
        at = 0
        for s, (ids, mask) in enumerate(row):
            k = len(ids)
            input_ids[b, at:at + k] = torch.tensor(ids, dtype=torch.long)
            positions[b, at:at + k] = torch.arange(k)
            segment[b, at:at + k] = s
            target_mask[b, at:at + k] = torch.tensor(mask, dtype=torch.bool)
            at += k
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    same = (segment[:, :, None] == segment[:, None, :]) & (segment[:, :, None] >= 0)
    # Padding queries see themselves only, so no softmax row is empty (NaN).
    allowed = (same & causal) | torch.eye(width, dtype=torch.bool)
    select = torch.zeros_like(target_mask)
    select[:, :-1] = target_mask[:, 1:] & (segment[:, 1:] == segment[:, :-1])
    targets = torch.zeros_like(input_ids)
    targets[:, :-1] = input_ids[:, 1:]
    return {"input_ids": input_ids, "attention_mask": allowed[:, None], "position_ids": positions,
            "select": select, "pred_slot": torch.arange(int(select.sum())), "pred_targets": targets[select]}


def build_group_batch(rows: list[tuple[list[int], list[list[int]]]], pad_id: int) -> dict[str, Any]:
    """Collate (prompt, completions) rows so that a prompt is computed once for all its completions.

    A row is laid out as prompt, completion 1, completion 2, ... Each completion attends to the
    prompt and to its own earlier tokens only, and its positions continue from the prompt's, so
    every completion sees exactly what it would see alone after the prompt (the same log-probs
    as `build_batch` of prompt + completion, for a fraction of the tokens when G is large).
    Targets are every completion token, in row, completion, token order; the first token of
    every completion is predicted from the prompt's last position (one LM-head slot, G targets).
    """
    import torch

    width = max(len(p) + sum(len(c) for c in cs) for p, cs in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    positions = torch.zeros((n, width), dtype=torch.long)
    segment = torch.full((n, width), -1, dtype=torch.long)  # 0 = prompt, k = completion k, -1 = padding
    select = torch.zeros((n, width), dtype=torch.bool)
    sources: list[tuple[int, int]] = []  # (row, column) whose output predicts each target
    targets: list[int] = []
    for b, (prompt, completions) in enumerate(rows):
        P = len(prompt)
        input_ids[b, :P] = torch.tensor(prompt, dtype=torch.long)
        positions[b, :P] = torch.arange(P)
        segment[b, :P] = 0
        at = P
        for k, completion in enumerate(completions, start=1):
            L = len(completion)
            input_ids[b, at:at + L] = torch.tensor(completion, dtype=torch.long)
            positions[b, at:at + L] = torch.arange(P, P + L)
            segment[b, at:at + L] = k
            sources += [(b, P - 1)] + [(b, at + t) for t in range(L - 1)]
            targets += completion
            at += L
    for b, col in sources:
        select[b, col] = True
    # LM-head slots are the selected positions in row-major order; map each target to its slot.
    slot_of = torch.full((n, width), -1, dtype=torch.long)
    slot_of[select] = torch.arange(int(select.sum()))
    pred_slot = torch.tensor([int(slot_of[b, col]) for b, col in sources], dtype=torch.long)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    q, k = segment[:, :, None], segment[:, None, :]
    allowed = causal & (q >= 0) & ((k == q) | (k == 0))
    allowed |= torch.eye(width, dtype=torch.bool)  # padding queries see themselves (no empty softmax row)
    return {"input_ids": input_ids, "attention_mask": allowed[:, None], "position_ids": positions,
            "select": select, "pred_slot": pred_slot, "pred_targets": torch.tensor(targets, dtype=torch.long)}


def target_logprobs(backend: Backend, batch: dict[str, Any], with_entropy: bool = False,
                    model: Any = None) -> tuple[Any, Any]:
    """Log-probs of the batch's targets (flat, in the batch's target order) and their entropy.

    Only the selected positions go through the LM head: with a 49K vocabulary the full logits
    tensor would dominate memory and time. Several targets may share one position
    (`pred_slot`), as the first tokens of a group's completions do.
    """
    import contextlib

    import torch

    model = model if model is not None else backend.model
    base = getattr(model, model.base_model_prefix)
    device = backend.device
    ctx = (torch.autocast(device.type, dtype=backend.autocast_dtype)
           if backend.autocast_dtype is not None else contextlib.nullcontext())
    select = batch["select"].to(device)
    with ctx:
        hidden = base(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                      position_ids=batch["position_ids"].to(device), use_cache=False).last_hidden_state
        logits = model.get_output_embeddings()(hidden[select])
    slot = batch["pred_slot"].to(device)
    logp = logits.float().log_softmax(-1)
    taken = logp[slot, batch["pred_targets"].to(device)]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp.exp() * logp).sum(-1)[slot]
    return taken, entropy
