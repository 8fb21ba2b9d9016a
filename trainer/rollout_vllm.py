"""vLLM rollouts on GPU, colocated with the trainer in the same process.

What: `VLLMRolloutEngine` implements trainer.rollout.RolloutEngine with a `vllm.LLM` that lives in
the trainer's process and shares its GPU (it takes `gpu_memory_utilization` of the memory; the rest
is the trainer's). After every optimizer update the trainer calls `sync_weights(model)`, which
pushes the torch state dict straight into vLLM's model with `load_weights` (no disk round trip) and
drops vLLM's prefix cache, whose KV entries were computed with the old weights.

Why in-process ("external_launcher"): it is the only executor whose model object is reachable from
the trainer, so weights move GPU-to-GPU. With tensor_parallel_size > 1 the trainer itself must be
launched with that many ranks (torchrun / the DeepSpeed launcher); each tensor-parallel group
then samples identically (same seed), the same contract TRL's colocate mode uses.

vLLM is GPU-only and its wheel replaces torch with a CUDA build, so it lives in the `[gpu]` extra
and is imported only when an engine is constructed.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Sequence

from trainer.rollout import Rollout, stop_token_ids


@dataclass
class VLLMOptions:
    """Settings of the colocated vLLM engine (GRPOConfig.vllm holds these keys)."""

    gpu_memory_utilization: float = 0.3
    """Fraction of GPU memory vLLM may take (weights + KV cache); the trainer uses the rest."""
    tensor_parallel_size: int = 1
    """GPUs per vLLM engine; must divide the trainer's world size (torchrun ranks)."""
    dtype: str = "auto"
    """Weight dtype inside vLLM: auto (the checkpoint's), bfloat16, float16 or float32."""
    max_model_len: int | None = None
    """Longest prompt + completion in tokens; None = the model's maximum."""
    max_num_seqs: int | None = None
    """Most sequences vLLM schedules at once; None = vLLM's default."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of the shared prompt across the G rollouts of a group."""
    enforce_eager: bool = False
    """Skip CUDA-graph capture (faster start, slower decoding); useful for tiny smoke tests."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed verbatim to `vllm.LLM`."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "VLLMOptions":
        """Build from GRPOConfig.vllm; unknown keys are an error naming them."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown vllm options {unknown}; known: {sorted(known)} (use `extra` for others)")
        return cls(**data)


def vllm_available() -> bool:
    """True when vllm imports and a CUDA device is visible (the only setting it runs in)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _distributed_env() -> None:
    """Single-process defaults for the variables the external launcher reads (torchrun sets them)."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))


class VLLMRolloutEngine:
    """Colocated `vllm.LLM` sampling prompts x G; weights pushed from the trainer after each update."""

    def __init__(self, model_path: str | os.PathLike, tokenizer: Any,
                 options: VLLMOptions | dict[str, Any] | None = None, seed: int = 0):
        if not vllm_available():
            raise RuntimeError(
                "rollout_engine=vllm needs a CUDA GPU and the [gpu] extra (pip install 'cascade-platform[gpu]'); "
                "use rollout_engine=hf on CPU"
            )
        from vllm import LLM

        self.options = options if isinstance(options, VLLMOptions) else VLLMOptions.from_dict(options)
        self.tokenizer = tokenizer
        self.stop_ids = stop_token_ids(tokenizer)
        _distributed_env()
        opts = asdict(self.options)
        extra = opts.pop("extra")
        world = int(os.environ["WORLD_SIZE"])
        if world % self.options.tensor_parallel_size:
            raise ValueError(f"tensor_parallel_size {self.options.tensor_parallel_size} must divide world size {world}")
        self.llm = LLM(
            model=str(model_path),
            distributed_executor_backend="external_launcher",
            # Ranks of one tensor-parallel group must sample the same tokens.
            seed=seed + int(os.environ["RANK"]) // self.options.tensor_parallel_size,
            # Log-probs after temperature/top-p: the distribution the tokens were drawn from.
            logprobs_mode="processed_logprobs",
            **{k: v for k, v in opts.items() if v is not None},
            **extra,
        )

    def _model(self) -> Any:
        return self.llm.llm_engine.model_executor.driver_worker.model_runner.model

    def sync_weights(self, model: Any) -> None:
        """Copy the trainer's current parameters into vLLM (one tensor at a time: no second full copy)."""
        import torch

        target = self._model()
        unwrapped = getattr(model, "module", model)  # DeepSpeed / DDP wrappers
        with torch.no_grad():
            for name, tensor in unwrapped.state_dict().items():
                target.load_weights([(name, tensor)])
        self.llm.reset_prefix_cache()

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
        """G rollouts for each prompt; result[i] holds prompt i's rollouts, as HFRolloutEngine returns them."""
        from vllm import SamplingParams

        params = SamplingParams(
            n=num_generations,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_new_tokens,
            seed=seed,
            stop_token_ids=self.stop_ids,
            logprobs=0 if return_logprobs else None,
            skip_special_tokens=True,
        )
        requests = [{"prompt_token_ids": list(ids)} for ids in prompt_token_ids]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        grouped: list[list[Rollout]] = []
        for index, request in enumerate(outputs):
            group = []
            for out in request.outputs:
                ids = list(out.token_ids)
                logprobs = None
                if return_logprobs and out.logprobs is not None:
                    logprobs = [step[tok].logprob for tok, step in zip(ids, out.logprobs)]
                truncated = out.finish_reason == "length"
                group.append(Rollout(index, ids, out.text, truncated, logprobs))
            grouped.append(group)
        return grouped

    def close(self) -> None:
        """Free vLLM's GPU memory (the engine is unusable afterwards)."""
        import gc

        import torch

        del self.llm
        gc.collect()
        torch.cuda.empty_cache()
