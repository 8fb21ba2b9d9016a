"""The `hf` engine: batched transformers decoding with a KV cache, on CPU or GPU.

What: `HFEngine` implements generation.engine.Engine over generation.hf_sampler's
`PrefixSharedSampler` (the same sampler the GRPO rollouts and the evals use, so teacher
samples, evals and rollouts of one model agree). It either loads a model folder
(AutoModelForCausalLM + AutoTokenizer, offline) or wraps an already-loaded model and tokenizer
(`HFEngine.from_loaded`, for the trainer and the evals, which hold them already).

Contract details:
* temperature 0 is greedy; log-probs are those of the distribution sampled from (after
  temperature and top-p; for greedy, the model's own);
* `Sampling.seed` seeds the whole call (a forked torch RNG, the global stream is untouched):
  the same requests, settings and seed give the same samples. Tokens are drawn by inverse CDF
  (one uniform per row; generation.hf_sampler.DRAWS), which decoded SmolLM2 ~25% faster on a
  CPU than torch.multinomial, the trainer's draw: same distribution, different random stream;
* a prompt with no room for `max_new_tokens` in the model's context
  (`config.max_position_embeddings`) is never sampled: `generate` raises
  generation.engine.PromptTooLong naming every such request before sampling any.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from generation.engine import Request, Sample, Sampling, check_prompt_lengths
from generation.hf_sampler import PrefixSharedSampler


def torch_dtype(dtype: Any) -> Any:
    """`auto` stays (the checkpoint's dtype); a name like `bfloat16` becomes that torch dtype."""
    import torch

    if dtype in (None, "auto") or isinstance(dtype, torch.dtype):
        return dtype or "auto"
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return value


def request_token_ids(tokenizer: Any, requests: Sequence[Request]) -> list[list[int]]:
    """Each request's prompt ids: its own when given, else its text tokenized as is (no BOS added)."""
    ids: list[list[int] | None] = [list(r.token_ids) if r.token_ids is not None else None for r in requests]
    todo = [i for i, x in enumerate(ids) if x is None]
    if todo:
        encoded = tokenizer([requests[i].text for i in todo], add_special_tokens=False)["input_ids"]
        for i, x in zip(todo, encoded):
            ids[i] = list(x)
    return [x or [] for x in ids]


def hf_version() -> str:
    """The `hf` engine's version (part of the generation cache key): transformers + torch."""
    import torch
    import transformers

    return f"hf-transformers{transformers.__version__}-torch{torch.__version__}"


def checked_prompt_ids(tokenizer: Any, requests: Sequence[Request], sampling: Sampling, samples: int,
                       context_length: int | None) -> list[list[int]]:
    """The requests' prompt ids after the checks every local engine makes before sampling anything:
    `samples` at least 1, and PromptTooLong naming every prompt with no room for max_new_tokens."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    prompts = request_token_ids(tokenizer, requests)
    check_prompt_lengths([len(p) for p in prompts], context_length, sampling.max_new_tokens)
    return prompts


class HFEngine:
    """Transformers generation behind the Engine interface (see the module docstring)."""

    name = "hf"

    def __init__(self, model: str | os.PathLike | None, dtype: Any = "auto", batch_size: int = 64,
                 device: str | None = None, torch_threads: int | None = None, draw: str = "inverse_cdf"):
        """Load the model folder `model`. `batch_size`: most rows (prompt x sample) per forward;
        `device`: None = cuda when available, else cpu; `torch_threads`: torch's CPU threads;
        `draw`: how tokens are drawn (generation.hf_sampler.DRAWS)."""
        if model is None:
            raise ValueError("the hf engine needs a model folder")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if torch_threads:
            torch.set_num_threads(torch_threads)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch_dtype(dtype)
        tokenizer = AutoTokenizer.from_pretrained(model)
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(device)
        self._init(loaded, tokenizer, batch_size, draw=draw)

    @classmethod
    def from_loaded(cls, model: Any, tokenizer: Any, batch_size: int = 64, synced: bool = False,
                    draw: str = "inverse_cdf") -> "HFEngine":
        """An engine over a model and tokenizer already in memory (shared, not copied)."""
        engine = cls.__new__(cls)
        engine._init(model, tokenizer, batch_size, synced, draw)
        return engine

    def _init(self, model: Any, tokenizer: Any, batch_size: int, synced: bool = False,
              draw: str = "inverse_cdf") -> None:
        self.sampler = PrefixSharedSampler(model, tokenizer, batch_size=batch_size, synced=synced, draw=draw)

    @property
    def model(self) -> Any:
        return self.sampler.model

    @property
    def tokenizer(self) -> Any:
        return self.sampler.tokenizer

    @property
    def stop_ids(self) -> list[int]:
        """Token ids that end a sample; an empty list never stops early (fixed-length benchmarks)."""
        return self.sampler.stop_ids

    @stop_ids.setter
    def stop_ids(self, ids: list[int]) -> None:
        self.sampler.stop_ids = list(ids)

    @property
    def context_length(self) -> int | None:
        """Longest prompt + completion the model takes (its max_position_embeddings), when it says."""
        return getattr(self.model.config, "max_position_embeddings", None)

    @property
    def version(self) -> str:
        return hf_version()

    def generate(self, requests: Sequence[Request], sampling: Sampling, samples: int = 1) -> list[list[Sample]]:
        """`samples` completions per request; raises PromptTooLong before sampling any (see module)."""
        prompts = checked_prompt_ids(self.tokenizer, requests, sampling, samples, self.context_length)
        if not prompts:
            return []
        grouped = self.sampler.sample(prompts, samples, sampling.max_new_tokens, sampling.temperature,
                                      sampling.top_p, seed=sampling.seed)
        decode = self.tokenizer.decode
        return [
            [Sample(request_index=i, sample_index=k, text=decode(row.token_ids, skip_special_tokens=True),
                    token_ids=row.token_ids, finish_reason="length" if row.truncated else "stop",
                    logprobs=row.logprobs if sampling.logprobs else None)
             for k, row in enumerate(group)]
            for i, group in enumerate(grouped)
        ]

    def close(self) -> None:
        """Drop the model (and, on a GPU, its cached memory)."""
        import gc

        sampler = getattr(self, "sampler", None)
        if sampler is None:
            return
        on_cuda = getattr(next(sampler.model.parameters()).device, "type", "cpu") == "cuda"
        del self.sampler
        gc.collect()
        if on_cuda:
            import torch

            torch.cuda.empty_cache()
