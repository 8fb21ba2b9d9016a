"""Batch layouts for the training forward and the log-prob pass shared by SFT and GRPO.

`build_batch` packs several sequences into one row (block-diagonal causal mask, positions
restarting per segment) so SFT wastes no compute on padding; `build_group_batch` lays a GRPO
prompt out once followed by its G completions (prefix-shared), each completion attending to the
prompt and to itself only. `target_logprobs` then runs the LM head on the target positions only:
with a 49K vocabulary the full logits tensor would dominate memory and time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.backend_api import Backend


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
