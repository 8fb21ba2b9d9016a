"""Rollout engines: sample G completions per prompt from the current policy.

The trainer only needs completion token ids and a `truncated` flag (GRPO is on-policy with
ratio 1, so sampling-time log-probs are optional). Engines are interchangeable behind
`RolloutEngine`: `HFRolloutEngine` here (CPU/GPU, prefix-shared sampling with the KV cache),
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
    """Prefix-shared sampling from a Hugging Face causal LM with the KV cache.

    Each distinct prompt is prefilled once and its cache is copied to its G rows, so the
    prompt's forward pass is not repeated G times (with G = 8 and 50-token prompts this was
    half of the sampling time on a CPU). The decode loop is ours rather than `generate`: it
    needs only temperature, top-p, stop tokens and the sampled log-probs, and it stops as
    soon as every row has ended. It shares the trainer's module, so `sync_weights` has
    nothing to copy.
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64, synced: bool = False):
        """`batch_size`: max rows (prompt x generation) per forward. `synced`: ranks of one
        ZeRO-3 group gather parameters inside every forward, so they keep stepping together
        until every rank's rows have ended."""
        self.model = model
        self.synced = synced
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
        # Prompts of similar length share a chunk to limit padding; a chunk holds whole groups.
        order = sorted(range(len(prompt_token_ids)), key=lambda i: len(prompt_token_ids[i]))
        per_chunk = max(1, self.batch_size // num_generations)
        grouped: list[list[Rollout]] = [[] for _ in prompt_token_ids]
        was_training = model.training
        model.eval()
        try:
            with seeded(seed, device), torch.no_grad():  # not inference_mode: ZeRO-3 reuses gathered params
                for start in range(0, len(order), per_chunk):
                    chunk = order[start:start + per_chunk]
                    prompts = [list(prompt_token_ids[i]) for i in chunk]
                    rows = self._sample_chunk(prompts, num_generations, max_new_tokens, temperature, top_p, device)
                    for k, (ids, lps, truncated) in enumerate(rows):
                        index = chunk[k // num_generations]
                        text = self.tokenizer.decode(ids, skip_special_tokens=True)
                        grouped[index].append(Rollout(index, ids, text, truncated,
                                                      lps if return_logprobs else None))
        finally:
            model.train(was_training)
        return grouped

    def _sample_chunk(self, prompts: list[list[int]], G: int, max_new_tokens: int, temperature: float,
                      top_p: float, device: Any) -> list[tuple[list[int], list[float], bool]]:
        """(token ids, log-probs, truncated) for G rows per prompt, in prompt-major order."""
        import torch

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every row's next token is at the same column
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                         position_ids=positions.to(device), use_cache=True, logits_to_keep=1)
        cache = out.cache
        if G > 1:
            cache.batch_repeat_interleave(G)
        logits = out.logits[:, -1].float().repeat_interleave(G, 0)
        mask = mask.repeat_interleave(G, 0).to(device)
        position = positions[:, -1:].repeat_interleave(G, 0).to(device) + 1
        stops = torch.tensor(self.stop_ids, device=device)
        n_rows = logits.shape[0]
        tokens = torch.full((n_rows, max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        logps = torch.zeros((n_rows, max_new_tokens), device=device)
        active = torch.arange(n_rows, device=device)  # which output row each batch row fills
        ended = torch.zeros(n_rows, dtype=torch.bool, device=device)
        steps = 0
        for step in range(max_new_tokens):
            token, logp = sample_next(logits, temperature, top_p)
            token = torch.where(ended, torch.full_like(token, self.pad_id), token)
            tokens[active, step], logps[active, step] = token, logp
            steps = step + 1
            ended |= torch.isin(token, stops)
            if steps == max_new_tokens or not self._any_running(ended):
                break
            # Rows that have ended leave the batch (their cache too), so the decode cost
            # follows the rows still sampling; one row stays so synced ranks keep stepping.
            if int(ended.sum()) * 8 >= len(active):
                keep = (~ended).nonzero().squeeze(-1)
                keep = keep if len(keep) else torch.zeros(1, dtype=torch.long, device=device)
                cache.batch_select_indices(keep)
                active, ended, token = active[keep], ended[keep], token[keep]
                mask, position = mask[keep], position[keep]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=position, cache=cache,
                             use_cache=True)
            position = position + 1
            logits = out.logits[:, -1].float()
        results = []
        for seq, lps in zip(tokens[:, :steps].tolist(), logps[:, :steps].tolist()):
            end = next((t for t, tok in enumerate(seq) if tok in self.stop_ids), None)
            keep_n = end + 1 if end is not None else len(seq)
            results.append((seq[:keep_n], lps[:keep_n], end is None))
        return results

    def _any_running(self, ended: Any) -> bool:
        """Whether any row (on any rank, when synced) still samples."""

        running = (~ended).sum()
        if self.synced:
            import torch.distributed as dist

            running = running.clone()
            dist.all_reduce(running)
        return bool(running > 0)


def sample_next(logits: Any, temperature: float, top_p: float = 1.0) -> tuple[Any, Any]:
    """One token per row from `logits / temperature`, restricted to the top-p nucleus.

    Returns the tokens and their log-probs under that processed distribution (what the
    sampler drew from). A vanishing temperature makes this greedy decoding.
    """
    import torch

    scaled = logits / temperature
    if top_p < 1.0:
        sorted_logits, sorted_idx = scaled.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already hold top_p of the mass.
        drop = (probs.cumsum(-1) - probs) >= top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, sorted_idx, sorted_logits)
    logp = scaled.log_softmax(-1)
    token = torch.multinomial(logp.exp(), 1).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)
