"""SFT: chat rows -> assistant-only next-token loss, packed, cosine schedule, grad accumulation.

Rows come from curation's SFT_SCHEMA (`messages` JSON). Each conversation is rendered with the
same ChatML as curation.chat and tokenized once with offsets, so the target mask covers exactly
the assistant contents and their `<|im_end|>` (not the role headers, not the other turns).
Packing fills `max_length` sequences best-fit-decreasing; attention never crosses rows.
The loss is the mean over every target token of the optimizer step (all micro-batches, all
ranks), which makes grad accumulation and data parallelism exact, not approximate.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from trainer.base import TrainerBase
from trainer.batching import build_batch, target_logprobs
from trainer.checkpointing import DataOrder
from trainer.config import SFTConfig

Segment = tuple[list[int], list[bool]]


def tokenize_conversation(tokenizer: Any, messages: list[dict[str, str]], max_length: int) -> Segment:
    """Token ids of the whole conversation and a mask of assistant-content tokens (+ <|im_end|>)."""
    from curation.chat import render_messages  # the one ChatML renderer (the chat template matches it)

    spans, text = [], ""
    for k, message in enumerate(messages):
        # In context: a /no_think answer's turn starts with the empty think block (not a target).
        piece = render_messages(messages[:k + 1])[len(text):]
        if message["role"] == "assistant":
            start = len(text) + len(piece) - len(message["content"]) - len("<|im_end|>\n")
            spans.append((start, len(text) + len(piece) - 1))  # up to and including <|im_end|>
        text += piece
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"][:max_length]
    mask = [any(s <= a < e for s, e in spans) for a, _ in enc["offset_mapping"][:max_length]]
    return ids, mask


def pack(segments: list[Segment], max_length: int, enabled: bool) -> list[list[Segment]]:
    """Best-fit-decreasing bins of at most max_length tokens (one segment per bin if disabled)."""
    if not enabled:
        return [[s] for s in segments]
    bins: list[list[Segment]] = []
    room: list[int] = []
    for seg in sorted(segments, key=lambda s: -len(s[0])):
        best = min((i for i, r in enumerate(room) if r >= len(seg[0])), key=lambda i: room[i], default=None)
        if best is None:
            bins.append([seg])
            room.append(max_length - len(seg[0]))
        else:
            bins[best].append(seg)
            room[best] -= len(seg[0])
    return bins


def load_sft_segments(config: Any, tokenizer: Any) -> tuple[list[Segment], dict[str, int]]:
    """Tokenized rows of the dataset; rows with no assistant token left are dropped (counted)."""
    import pyarrow.parquet as pq

    table = pq.read_table(config.dataset, columns=["messages"])
    segments, dropped = [], {"no_target_tokens": 0}
    for raw in table.column("messages").to_pylist():
        ids, mask = tokenize_conversation(tokenizer, json.loads(raw), config.max_length)
        if any(mask[1:]):
            segments.append((ids, mask))
        else:
            dropped["no_target_tokens"] += 1
    return segments, dropped


class SFTTrainer(TrainerBase[SFTConfig]):
    """Owns data and the step function; the stage runner owns the loop, checkpoints and outputs."""

    algorithm = "sft"
    progress_keys = ("loss", "lr", "grad_norm", "tokens_per_s")

    def __init__(self, config: SFTConfig, tokenizer: Any, world_size: int = 1, rank: int = 0):
        super().__init__(config, tokenizer, world_size=world_size, rank=rank)
        segments, self.dropped = load_sft_segments(config, tokenizer)
        if not segments:
            raise ValueError(f"{config.dataset}: no SFT rows with assistant tokens")
        self.rows = pack(segments, config.max_length, config.packing)
        self.rows_per_step = config.batch_size * config.grad_accum * world_size
        self.total_steps = config.max_steps or max(1, math.ceil(len(self.rows) * config.epochs / self.rows_per_step))
        self.warmup_steps = int(round(config.warmup_ratio * self.total_steps))
        self.order = DataOrder(len(self.rows), config.seed)

    def summary(self) -> dict[str, Any]:
        return {"rows": sum(len(r) for r in self.rows), "sequences": len(self.rows),
                "total_steps": self.total_steps, "dropped": self.dropped}

    def train_step(self, step: int) -> dict[str, float]:
        """One optimizer step over grad_accum micro-batches of this rank's share of rows."""
        backend, cfg = self.backend, self.config
        t0 = time.perf_counter()
        picked = self.order.take(self.rows_per_step)  # every rank draws the same global order
        mine = picked[self.rank::self.world_size]
        micro = [mine[i:i + cfg.batch_size] for i in range(0, len(mine), cfg.batch_size)]
        batches = [build_batch([self.rows[i] for i in idx], self.pad_id) for idx in micro]
        local_tokens = sum(len(seg[0]) for i in mine for seg in self.rows[i])
        n_targets, n_tokens = backend.all_reduce_sum([float(sum(int(b["select"].sum()) for b in batches)),
                                                      float(local_tokens)])
        n_targets = max(n_targets, 1.0)
        total_loss = 0.0
        for k, batch in enumerate(batches):
            logp, _ = target_logprobs(backend, batch)
            loss = -logp.sum() / n_targets
            backend.backward(loss * backend.grad_scale(), last=k == len(batches) - 1)
            total_loss += float(loss.detach())
        grad_norm = backend.step()
        (loss_sum,) = backend.all_reduce_sum([total_loss])
        elapsed = time.perf_counter() - t0
        return {"loss": loss_sum, "lr": backend.lr(), "grad_norm": grad_norm, "target_tokens": n_targets,
                "tokens": n_tokens, "tokens_per_s": n_tokens / max(elapsed, 1e-9), "step_time_s": elapsed,
                "epoch": float(self.order.epoch)}
