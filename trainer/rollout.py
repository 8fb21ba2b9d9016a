"""Rollout engines: sample G completions per prompt from the current policy.

The trainer only needs completion token ids and a `truncated` flag (GRPO is on-policy with
ratio 1, so sampling-time log-probs are optional). Engines are interchangeable behind
`RolloutEngine`: `HFRolloutEngine` here (CPU/GPU, Hugging Face generate with the KV cache),
`VLLMRolloutEngine` in rollout_vllm.py (GPU only).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable


@dataclass
class Rollout:
    """One sampled completion of one prompt."""

    prompt_index: int
    """Index of the prompt in the list passed to `generate`."""
    token_ids: list[int]
    """Completion tokens, without padding; ends with the stop token unless truncated."""
    text: str
    """Decoded completion without special tokens (what rewards score)."""
    truncated: bool
    """True when the completion hit max_new_tokens without a stop token."""
    logprobs: list[float] | None = field(default=None)
    """Sampling-time log-probs of `token_ids` (after temperature), when requested."""


@runtime_checkable
class RolloutEngine(Protocol):
    """What the GRPO loop needs from a sampler."""

    def generate(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        num_generations: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        seed: int | None = None,
        return_logprobs: bool = False,
    ) -> list[list[Rollout]]:
        """G rollouts for each prompt: result[i] holds the rollouts of prompt i."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the sampler use the trainer's current weights (no-op when it shares them)."""
        ...


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """End-of-turn ids: <|im_end|>, the tokenizer eos and the generation config's eos ids."""
    ids: list[int] = []
    candidates = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    gen_eos = getattr(generation_config, "eos_token_id", None)
    candidates += gen_eos if isinstance(gen_eos, list) else [gen_eos]
    for tid in candidates:
        if isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    return ids


@contextlib.contextmanager
def seeded(seed: int | None, device: Any = None):
    """Run a block under its own torch RNG seed, leaving the global RNG stream untouched."""
    import torch

    if seed is None:
        yield
        return
    devices = [device] if device is not None and getattr(device, "type", "cpu") == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class HFRolloutEngine:
    """Batched `model.generate` over prompts x G with left padding and the KV cache.

    It shares the trainer's module, so `sync_weights` has nothing to copy.
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64, generate_kwargs: dict[str, Any] | None = None):
        self.model = model
        self.generate_kwargs = dict(generate_kwargs or {})
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.stop_ids = stop_token_ids(tokenizer, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]

    def sync_weights(self, model: Any) -> None:
        self.model = model

    def generate(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        num_generations: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        seed: int | None = None,
        return_logprobs: bool = False,
    ) -> list[list[Rollout]]:
        import torch

        model = self.model
        device = next(model.parameters()).device
        # One row per (prompt, generation); similar lengths share a batch to limit padding.
        rows = [i for i in range(len(prompt_token_ids)) for _ in range(num_generations)]
        order = sorted(range(len(rows)), key=lambda r: len(prompt_token_ids[rows[r]]))
        results: list[Rollout | None] = [None] * len(rows)
        was_training = model.training
        model.eval()
        try:
            with seeded(seed, device), torch.no_grad():  # not inference_mode: ZeRO-3 reuses gathered params
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start:start + self.batch_size]
                    prompts = [list(prompt_token_ids[rows[r]]) for r in chunk]
                    outs = self._generate_batch(prompts, max_new_tokens, temperature, top_p, return_logprobs, device)
                    for r, (ids, lps, truncated) in zip(chunk, outs):
                        text = self.tokenizer.decode(ids, skip_special_tokens=True)
                        results[r] = Rollout(rows[r], ids, text, truncated, lps)
        finally:
            model.train(was_training)
        grouped: list[list[Rollout]] = [[] for _ in prompt_token_ids]
        for rollout in results:
            assert rollout is not None
            grouped[rollout.prompt_index].append(rollout)
        return grouped

    def _generate_batch(self, prompts, max_new_tokens, temperature, top_p, return_logprobs, device):
        import torch

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        out = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_scores=return_logprobs,
            **self.generate_kwargs,
        )
        new = out.sequences[:, width:].tolist()
        logprobs = None
        if return_logprobs:
            # scores are the processed (temperature / top-p) logits the tokens were drawn from.
            scores = torch.stack(out.scores, dim=1).float().log_softmax(-1)
            taken = out.sequences[:, width:].unsqueeze(-1)
            logprobs = scores.gather(-1, taken).squeeze(-1).tolist()
        results = []
        for i, seq in enumerate(new):
            end = next((t for t, tok in enumerate(seq) if tok in self.stop_ids), None)
            ids = seq[: end + 1] if end is not None else seq
            lps = logprobs[i][: len(ids)] if logprobs is not None else None
            results.append((ids, lps, end is None))
        return results
