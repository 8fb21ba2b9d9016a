"""Batch layouts for the training forward and the log-prob pass shared by SFT and GRPO.

Both layouts are padding-free: every sequence of a micro-batch is laid end to end in one flat row
(batch dimension 1), with `position_ids` restarting per segment and a `segments` table of
(start, end, prefix_start, prefix_end) boundaries instead of an L x L mask. trainer.attention
honours the table (flash-attn varlen on GPU, SDPA per segment elsewhere), so memory grows with L,
not L^2, and no compute is spent on padding.

`build_batch` packs SFT sequences: each segment attends causally to itself only.
`build_group_batch` lays a GRPO prompt out once followed by its G completions (prefix-shared):
each completion attends to the prompt (its prefix) and to its own earlier tokens only.
`target_logprobs` then runs the LM head on the target positions only: with a 49K vocabulary the
full logits tensor would dominate memory and time. RL stages pass the rollouts' sampling
temperature, so the log-probs they train on are those of the distribution that sampled
(see `target_logprobs`); `sampler_gap` measures how far apart the two still are.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from generation.hf_sampler import GREEDY_BELOW

if TYPE_CHECKING:
    from trainer.backend_api import Backend


def logit_temperature(temperature: float | None) -> float:
    """What the logits are divided by for rollouts sampled at `temperature`: the temperature
    itself, or 1 (unscaled) for greedy decoding, whose sampler log-probs are the model's own."""
    if temperature is None or temperature < GREEDY_BELOW:
        return 1.0
    return float(temperature)


def build_batch(rows: list[list[tuple[list[int], list[bool]]]], pad_id: int = 0) -> dict[str, Any]:
    """Collate rows of segments (token ids, target mask) into one flat packed row.

    Rows (packing bins) and their segments are laid end to end; attention stays inside a segment
    and positions restart at 0 per segment. `select[0, t]` marks positions whose *next* token is a
    training target (its id is `input_ids[0, t + 1]`). `pad_id` is unused: nothing is padded.
    """
    import torch

    ids: list[int] = []
    positions: list[int] = []
    target_mask: list[bool] = []
    spans: list[tuple[int, int, int, int]] = []
    for row in rows:
        for seg_ids, mask in row:
            if not seg_ids:
                continue
            at = len(ids)
            ids += seg_ids
            positions += range(len(seg_ids))
            target_mask += mask
            spans.append((at, len(ids), at, at))
    input_ids = torch.tensor([ids], dtype=torch.long)
    wanted = torch.tensor(target_mask, dtype=torch.bool)
    starts = torch.zeros(len(ids), dtype=torch.bool)
    starts[[s for s, _, _, _ in spans]] = True
    select = torch.zeros((1, len(ids)), dtype=torch.bool)
    select[0, :-1] = wanted[1:] & ~starts[1:]  # a segment's first token is never a target
    return {"input_ids": input_ids, "position_ids": torch.tensor([positions], dtype=torch.long),
            "segments": torch.tensor(spans, dtype=torch.long).reshape(-1, 4), "select": select,
            "pred_slot": torch.arange(int(select.sum())), "pred_targets": input_ids[0, 1:][select[0, :-1]]}


def build_group_batch(rows: list[tuple[list[int], list[list[int]]]], pad_id: int = 0) -> dict[str, Any]:
    """Collate (prompt, completions) rows so that a prompt is computed once for all its completions.

    A row is laid out as prompt, completion 1, completion 2, ... (rows end to end, unpadded). Each
    completion attends to the prompt and to its own earlier tokens only, and its positions
    continue from the prompt's, so every completion sees exactly what it would see alone after
    the prompt (the same log-probs as `build_batch` of prompt + completion, for a fraction of the
    tokens when G is large). Targets are every completion token, in row, completion, token order;
    the first token of every completion is predicted from the prompt's last position (one LM-head
    slot, G targets). Empty completions have no targets. `pad_id` is unused.
    """
    import torch

    ids: list[int] = []
    positions: list[int] = []
    spans: list[tuple[int, int, int, int]] = []
    sources: list[int] = []  # the column whose output predicts each target
    targets: list[int] = []
    for prompt, completions in rows:
        a, P = len(ids), len(prompt)
        ids += prompt
        positions += range(P)
        spans.append((a, a + P, a, a))
        for completion in completions:
            if not completion:
                continue
            at, L = len(ids), len(completion)
            ids += completion
            positions += range(P, P + L)
            spans.append((at, at + L, a, a + P))
            sources += [a + P - 1, *range(at, at + L - 1)]
            targets += completion
    select = torch.zeros((1, len(ids)), dtype=torch.bool)
    select[0, sources] = True
    # LM-head slots are the selected positions in order; map each target to its slot.
    slot_of = select[0].long().cumsum(0) - 1
    return {"input_ids": torch.tensor([ids], dtype=torch.long), "position_ids": torch.tensor([positions], dtype=torch.long),
            "segments": torch.tensor(spans, dtype=torch.long).reshape(-1, 4), "select": select,
            "pred_slot": slot_of[sources], "pred_targets": torch.tensor(targets, dtype=torch.long)}


def target_logprobs(backend: Backend, batch: dict[str, Any], with_entropy: bool = False,
                    model: Any = None, temperature: float = 1.0) -> tuple[Any, Any]:
    """Log-probs of the batch's targets (flat, in the batch's target order) and their entropy.

    Only the selected positions go through the LM head: with a 49K vocabulary the full logits
    tensor would dominate memory and time. Several targets may share one position
    (`pred_slot`), as the first tokens of a group's completions do. A batch with `segments`
    switches the model to trainer.attention's varlen implementation (sdpa-equivalent otherwise).

    `temperature`: the log-probs (and entropy) are log softmax(logits / temperature) over the
    full vocabulary, the distribution rollouts sampled at that temperature came from, so an RL
    update is on-policy for them; 1 (SFT) leaves the logits as they are, and a temperature below
    GREEDY_BELOW (greedy, 0: both engines' threshold, generation.hf_sampler) counts as 1 instead
    of dividing by zero. This is what verl (`logits.div_(temperature)` in its dp_actor before the
    log-probs) and TRL (GRPOTrainer divides by `self.temperature` when it scores completions:
    `add_fused_lm_head(model, temperature=...)` in TRL 1.16) compute. Top-p is not applied here,
    as in verl and TRL: the samplers' log-probs (generation.hf_sampler and vLLM's
    `processed_logprobs`) are renormalised over the nucleus, so with top_p < 1 a sampled token's
    sampler log-prob exceeds this one by −log(nucleus mass) of its step, and the importance ratio
    π_train/π_inf sits below 1 there. The recipes' RL stages sample with top_p = 1, where the
    two agree.
    """
    import contextlib

    import torch

    model = model if model is not None else backend.model
    base = getattr(model, model.base_model_prefix)
    device = backend.device
    ctx = (torch.autocast(device.type, dtype=backend.autocast_dtype)
           if backend.autocast_dtype is not None else contextlib.nullcontext())
    select = batch["select"].to(device)
    extra: dict[str, Any] = {}
    if "segments" in batch:  # packed layout: boundaries, no mask
        from trainer.attention import PackedSegments, use_varlen_attention

        use_varlen_attention(model)
        extra["packed_segments"] = PackedSegments.from_tensor(batch["segments"], device)
    if "attention_mask" in batch:  # a caller's own (dense) mask
        extra["attention_mask"] = batch["attention_mask"].to(device)
    with ctx:
        hidden = base(input_ids=batch["input_ids"].to(device), position_ids=batch["position_ids"].to(device),
                      use_cache=False, **extra).last_hidden_state
        logits = model.get_output_embeddings()(hidden[select])
    slot = batch["pred_slot"].to(device)
    divisor = logit_temperature(temperature)
    logits = logits.float() if divisor == 1.0 else logits.float() / divisor
    logp = logits.log_softmax(-1)
    taken = logp[slot, batch["pred_targets"].to(device)]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp.exp() * logp).sum(-1)[slot]
    return taken, entropy


def sampler_gap(logp: Any, lengths: Sequence[int], sampled: Sequence[Sequence[float] | None]) -> tuple[float, int, float]:
    """(sum, count, max) of |training log-prob − sampler log-prob| over a micro-batch's tokens.

    `logp` holds the micro-batch's flat training log-probs, rollout after rollout (`lengths`
    tokens each); `sampled[i]` is rollout i's sampler log-probs, or None (not returned, or of
    another length: its tokens are not counted).
    """
    import torch

    total, count, worst = 0.0, 0, 0.0
    for part, lps in zip(logp.detach().float().split(list(lengths)), sampled):
        if lps is None or len(lps) != len(part) or not len(part):
            continue
        gap = (part - torch.tensor(lps, dtype=part.dtype, device=part.device)).abs()
        total, count, worst = total + float(gap.sum()), count + len(part), max(worst, float(gap.max()))
    return total, count, worst


def gap_metrics(parts: Sequence[tuple[float, int, float]]) -> dict[str, float]:
    """`rollout_logprob_diff_mean` / `_max` from the (sum, count, max) of `sampler_gap` on each
    part of a step (micro-batches, ranks); NaN when no token was measured."""
    n = sum(c for _, c, _ in parts)
    if not n:
        return {"rollout_logprob_diff_mean": math.nan, "rollout_logprob_diff_max": math.nan}
    return {"rollout_logprob_diff_mean": sum(t for t, _, _ in parts) / n,
            "rollout_logprob_diff_max": max(w for _, c, w in parts if c)}
