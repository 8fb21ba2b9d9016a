"""A KV cache allocated once per decode and written in place, for generation.hf_sampler.

What: `preallocated_cache(config, rows, length)` is a transformers `Cache` whose every layer
holds its keys and values in buffers of `rows` x heads x `length` x head_dim, allocated on the
first write (the prefill). Each step writes the new token's keys and values at the next column
and hands attention a view of exactly the filled columns, so attention computes on the same
numbers in the same shapes as with transformers' DynamicCache (only the view's strides differ;
tokens and log-probs came out bit-identical on CPU SDPA, tests/generation/test_kv_cache.py). Rows leave the batch and a prompt's row is copied to
its k sample rows in place (`batch_select_indices`, `batch_repeat_interleave`), moving only the
filled columns of the rows that move.

Why: DynamicCache appends by `torch.cat` per layer per step, copying the whole cache each time
(O(L^2) bytes over L tokens): 38 % of the SWE eval decode time on SmolLM2 on 2 CPU cores. Not
transformers' StaticCache: it masks a fixed-length cache (attention then runs over every
preallocated column, padding included, and the mask shapes differ), which changes the attention
numerics; a view of the filled prefix keeps them bit-identical.
"""

from __future__ import annotations

import functools
from typing import Any


def preallocated_cache(config: Any, rows: int, length: int) -> Any | None:
    """A cache of `rows` x `length` tokens per layer for a model of `config`, or None when a
    layer is not plain full attention (sliding windows, linear attention, KV sharing): the
    model then builds its own DynamicCache as before."""
    from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, Cache, DynamicLayer, get_layer_types_and_kwargs

    layer_types, _ = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    if not layer_types or any(DYNAMIC_LAYER_TYPE_MAPPING.get(t) is not DynamicLayer for t in layer_types):
        return None
    layer_class = _layer_class()
    return Cache(layers=[layer_class(rows, length) for _ in layer_types])


@functools.cache
def _layer_class() -> Any:
    """PreallocatedLayer, defined on first use so that importing this module stays free of torch."""
    import torch
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """One layer's keys and values in fixed buffers; `keys`/`values` are views of the filled part.

        Inherits DynamicLayer's mask sizes and sequence length (both read the views), so masks
        are built exactly as for a DynamicCache of the same contents."""

        def __init__(self, rows: int, length: int):
            super().__init__()
            self.capacity = (rows, length)
            self.key_buffer: torch.Tensor | None = None
            self.value_buffer: torch.Tensor | None = None
            self.rows = 0     # rows in use: buffer rows [0, rows)
            self.filled = 0   # columns written: buffer columns [0, filled)

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.device = key_states.device
            self.key_buffer = self._buffer_like(key_states)
            self.value_buffer = self._buffer_like(value_states)
            self.is_initialized = True

        def _buffer_like(self, states: torch.Tensor) -> torch.Tensor:
            rows = max(self.capacity[0], states.shape[0])
            length = max(self.capacity[1], states.shape[-2])
            # Never read before written: every view covers written columns only.
            return states.new_empty((rows, states.shape[1], length, states.shape[-1]))

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            rows, end = key_states.shape[0], self.filled + key_states.shape[-2]
            if self.filled and rows != self.rows:
                raise ValueError(f"the cache holds {self.rows} rows, the update {rows}")
            if rows > self.key_buffer.shape[0] or end > self.key_buffer.shape[-2]:
                self._grow(rows, end)
            self.key_buffer[:rows, :, self.filled:end] = key_states
            self.value_buffer[:rows, :, self.filled:end] = value_states
            self.rows, self.filled = rows, end
            self._refresh_views()
            return self.keys, self.values

        def _grow(self, rows: int, length: int) -> None:
            """Past the planned size (a caller that decodes longer): move to buffers twice as long."""
            old_keys, old_values = self.keys, self.values
            self.capacity = (max(rows, self.capacity[0]), max(length, 2 * self.capacity[1]))
            self.key_buffer = self._buffer_like(self.key_buffer[:0])
            self.value_buffer = self._buffer_like(self.value_buffer[:0])
            if self.filled:
                self.key_buffer[:self.rows, :, :self.filled] = old_keys
                self.value_buffer[:self.rows, :, :self.filled] = old_values

        def _refresh_views(self) -> None:
            self.keys = self.key_buffer[:self.rows, :, :self.filled]
            self.values = self.value_buffer[:self.rows, :, :self.filled]

        def batch_repeat_interleave(self, repeats: int) -> None:
            """Row i becomes rows i*repeats .. i*repeats + repeats - 1 (a prompt's cache for its samples)."""
            if not self.filled or repeats == 1:
                return
            rows = self.rows * repeats
            if rows > self.key_buffer.shape[0]:
                self._grow(rows, self.filled)
            source = torch.arange(self.rows, device=self.device).repeat_interleave(repeats)
            self._move_rows(source)

        def batch_gather(self, source: torch.Tensor) -> None:
            """Row j := old row source[j] (any order, repeats allowed): a shared prefix copied to its prompts."""
            if not self.filled:
                return
            if len(source) > self.key_buffer.shape[0]:
                self._grow(len(source), self.filled)
            self._move_rows(source.to(self.device))

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Keep rows `indices` (ascending, as finished rows leave), now rows 0 .. len(indices) - 1."""
            if not self.filled:
                return
            if indices.dtype == torch.bool:
                indices = indices.nonzero().squeeze(-1)
            self._move_rows(indices.to(self.device))

        def _move_rows(self, source: torch.Tensor) -> None:
            """Buffer row j := old row source[j] for every j, copying only rows that change."""
            target = torch.arange(len(source), device=self.device)
            moved = source != target
            if bool(moved.any()):
                # Gathered first (a copy), then scattered: targets may overlap other rows' sources.
                for buffer in (self.key_buffer, self.value_buffer):
                    buffer[target[moved], :, :self.filled] = buffer[source[moved], :, :self.filled]
            self.rows = len(source)
            self._refresh_views()

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            self.batch_select_indices(beam_idx)

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes the negative number of tokens to remove")
            if tokens_to_remove and self.filled:
                self.filled = max(0, self.filled + tokens_to_remove)
                self._refresh_views()

        def reset(self) -> None:
            self.rows = self.filled = 0
            if self.is_initialized:
                self._refresh_views()

    return PreallocatedLayer
