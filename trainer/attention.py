"""Varlen attention for packed batches: segment boundaries instead of an L x L mask.

A packed batch is one flat row of segments. Each segment attends causally to itself and, when it
has one, fully to a shared prefix earlier in the row (a GRPO completion sees its prompt); this is
`PackedSegments`, passed to the model as the `packed_segments` keyword, which transformers hands to
every attention layer. Memory stays O(L) for the layout instead of O(L^2) for a dense mask.

Kernels, chosen per call:
- CUDA with flash-attn installed, bf16/fp16 activations or autocast: one `flash_attn_varlen_func` call
  (cu_seqlens; a prefixed segment's keys are gathered as prefix + itself, and flash's causal mask
  is bottom-right aligned, so each query sees the prefix plus its own earlier tokens).
- Otherwise (CPU, fp32, no flash-attn): scaled_dot_product_attention once per segment. Measured on
  CPU (benchmarks/bench_packing.py) this beats the dense mask in both memory and time. Flex
  attention was ruled out: torch 2.13 has no flex backward on CPU.

`use_varlen_attention(model)` switches a Hugging Face model to the "cascade_varlen"
implementation. Without `packed_segments` it behaves as "sdpa" (generation, evaluation, padded
2D masks); packed `position_ids` without segments are split per segment as sdpa would mask them.
Sliding-window attention is not expressible here and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import torch

NAME = "cascade_varlen"
Span = tuple[int, int, int, int]  # (start, end, prefix_start, prefix_end); prefix empty when equal


@dataclass(frozen=True, eq=False)
class PackedSegments:
    """Segments of a flat packed row, plus the flash-attn varlen arguments derived from them."""

    spans: tuple[Span, ...]
    device: Any = "cpu"

    @classmethod
    def from_tensor(cls, table: Any, device: Any) -> PackedSegments:
        """From a batch's [S, 4] `segments` tensor (start, end, prefix_start, prefix_end)."""
        return cls(tuple(tuple(int(x) for x in row) for row in table.tolist()), torch.device(device))

    @property
    def has_prefix(self) -> bool:
        return any(p1 > p0 for _, _, p0, p1 in self.spans)

    @cached_property
    def flash_args(self) -> dict[str, Any]:
        """cu_seqlens_q/k, max_seqlen_q/k and the key gather index (None without prefixes)."""
        q_lens = [e - s for s, e, _, _ in self.spans]
        k_lens = [e - s + p1 - p0 for s, e, p0, p1 in self.spans]
        cu = lambda lens: torch.tensor([0, *lens], dtype=torch.int32).cumsum(0, dtype=torch.int32).to(self.device)
        index = None
        if self.has_prefix:
            parts = [torch.cat([torch.arange(p0, p1), torch.arange(s, e)]) for s, e, p0, p1 in self.spans]
            index = torch.cat(parts).to(self.device)
        return {"cu_seqlens_q": cu(q_lens), "cu_seqlens_k": cu(k_lens), "max_seqlen_q": max(q_lens),
                "max_seqlen_k": max(k_lens), "kv_index": index}


def segments_from_positions(positions: Any) -> list[PackedSegments]:
    """One PackedSegments per row: a segment starts wherever a position does not follow its neighbour."""
    out = []
    for row in positions:
        starts = [0] + (torch.nonzero(row[1:] != row[:-1] + 1).flatten() + 1).tolist()
        ends = starts[1:] + [row.numel()]
        out.append(PackedSegments(tuple((s, e, s, s) for s, e in zip(starts, ends)), positions.device))
    return out


@cache
def _flash_varlen() -> Any:
    """flash-attn's varlen kernel, or None where it is not installed (looked up once)."""
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


def _per_segment(query: Any, key: Any, value: Any, segments: PackedSegments, dropout: float,
                 scaling: float | None) -> Any:
    """SDPA per segment on one row ([1, H, L, D]); returns [1, L, H, D]."""
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    gqa = query.shape[1] != key.shape[1]
    outs = []
    for s, e, p0, p1 in segments.spans:
        q, k, v = query[:, :, s:e], key[:, :, s:e], value[:, :, s:e]
        if p1 > p0:  # prefix fully visible, then causal within the segment (bottom-right aligned)
            k = torch.cat([key[:, :, p0:p1], k], dim=2)
            v = torch.cat([value[:, :, p0:p1], v], dim=2)
            mask = torch.ones(e - s, k.shape[2], dtype=torch.bool, device=q.device).tril(p1 - p0)
            outs.append(sdpa(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scaling, enable_gqa=gqa))
        else:
            outs.append(sdpa(q, k, v, dropout_p=dropout, scale=scaling, is_causal=e - s > 1, enable_gqa=gqa))
    return torch.cat(outs, dim=2).transpose(1, 2)


def _flash_dtype(query: Any) -> Any:
    """Half dtype flash-attn can run in: the query's, or autocast's for fp32 queries (rotary
    embeddings promote q/k to fp32 under autocast); None when there is none."""
    halves = (torch.float16, torch.bfloat16)
    if query.dtype in halves:
        return query.dtype
    if torch.is_autocast_enabled(query.device.type) and torch.get_autocast_dtype(query.device.type) in halves:
        return torch.get_autocast_dtype(query.device.type)
    return None


def _flash(query: Any, key: Any, value: Any, segments: PackedSegments, dropout: float,
           scaling: float | None, fn: Any) -> Any:
    """One flash-attn varlen call over the flat row; returns [1, L, H, D]."""
    args = dict(segments.flash_args)
    index = args.pop("kv_index")
    dtype = _flash_dtype(query)
    q, k, v = (x[0].transpose(0, 1).to(dtype) for x in (query, key, value))  # [L, heads, D]
    if index is not None:
        k, v = k[index], v[index]
    out = fn(q, k, v, dropout_p=dropout, softmax_scale=scaling, causal=True, **args)
    return (out[0] if isinstance(out, tuple) else out).unsqueeze(0)


def varlen_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                     dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """The "cascade_varlen" attention: segments when given (or implied by positions), else sdpa."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments = kwargs.pop("packed_segments", None)
    per_row: list[PackedSegments] | None = [segments] if segments is not None else None
    positions = kwargs.get("position_ids")
    if per_row is None and attention_mask is None and positions is not None and query.shape[2] > 1:
        found = segments_from_positions(positions.expand(query.shape[0], -1))
        per_row = found if any(len(s.spans) > 1 for s in found) else None
    if per_row is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    if kwargs.get("sliding_window") is not None:
        raise NotImplementedError("packed varlen attention does not support sliding-window layers")
    if len(per_row) != query.shape[0]:
        raise ValueError(f"packed_segments describe {len(per_row)} row(s), the batch has {query.shape[0]}")
    fn = _flash_varlen() if query.is_cuda and _flash_dtype(query) is not None else None
    rows = [_flash(query[b:b + 1], key[b:b + 1], value[b:b + 1], seg, dropout, scaling, fn) if fn is not None
            else _per_segment(query[b:b + 1], key[b:b + 1], value[b:b + 1], seg, dropout, scaling)
            for b, seg in enumerate(per_row)]
    return torch.cat(rows).contiguous(), None


def varlen_mask(**kwargs: Any) -> Any:
    """Mask factory: none for full self-attention without padding (the attention function handles
    causality and segments); sdpa's mask otherwise (padding, caches)."""
    from transformers.masking_utils import sdpa_mask

    if (kwargs.get("attention_mask") is None and kwargs.get("q_offset", 0) == 0 and kwargs.get("kv_offset", 0) == 0
            and kwargs["q_length"] == kwargs["kv_length"]):
        return None
    return sdpa_mask(**kwargs)


def register() -> None:
    """Make "cascade_varlen" known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, varlen_attention)
    AttentionMaskInterface.register(NAME, varlen_mask)


def use_varlen_attention(model: Any) -> None:
    """Switch `model` to "cascade_varlen" once; refuse models with sliding-window layers."""
    config = model.config
    if getattr(config, "_attn_implementation", None) == NAME:
        return
    if "sliding_attention" in (getattr(config, "layer_types", None) or []):
        raise NotImplementedError(f"{type(model).__name__}: packed training does not support sliding-window layers")
    register()
    model.set_attn_implementation(NAME)
