"""The `vllm` engine: vLLM on a GPU (the [gpu] extra) or on CPUs (the `vllm-cpu` build).

What: `VLLMEngine` implements generation.engine.Engine with a `vllm.LLM` living in this process;
`build_llm` and `push_weights` are the one vLLM setup that the GRPO rollouts
(trainer.rollout_vllm) share, so teacher sampling, evals and rollouts configure vLLM alike.

Why in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0 unless set): the model is then reachable
from here, so a call's seed and a policy update's weights go straight to it:
* seeding: per-request `SamplingParams(seed=)` crashes the CPU build, so the engine is seeded
  once (`LLM(seed=)`) and every `generate` runs under its own torch seed (`Sampling.seed`,
  a forked RNG), which is what vLLM's sampler draws from: same requests + seed = same samples;
* weights: `push_weights` streams a state dict through the workers' `reload_weights` (a direct
  `model.load_weights` breaks on CPU, whose backend repacks weights after loading) and drops
  the prefix cache, whose KV entries came from the old weights.
On a 2-core CPU in-process decoding was also faster than vLLM's engine-core process (SmolLM2,
eager fp32: ~280 vs ~160 tokens/s), which binds its OpenMP threads but competes for the cores.

On CPU the KV cache takes `cpu_kvcache_space_gib` GiB (VLLM_CPU_KVCACHE_SPACE). The CPU build
needs transformers<5.20, so it lives in its own venv (`make vllm-cpu` -> .venv-vllm/); its
server is `python -m vllm.entrypoints.openai.api_server` (`vllm serve` does not start under
that package name). Log-probs are vLLM's `processed_logprobs` (after temperature / top-p; for
greedy, the model's own), like the hf engine's; the RL trainer's training forward divides its
logits by the same temperature (trainer.batching.target_logprobs) to compare with them. Greedy
requests are sampled once and the sample copied k times (vLLM refuses n > 1 at temperature 0). Emptying `stop_ids` makes every
sample run to max_new_tokens (`ignore_eos`, as the hf engine does; for benchmarks).
"""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import os
import socket
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Sequence

from generation.engine import Request, Sample, Sampling
from generation.hf import checked_prompt_ids
from generation.hf_sampler import GREEDY_BELOW, seeded, stop_token_ids


@dataclass
class VLLMOptions:
    """Settings of a vLLM engine (GRPOConfig.vllm and the `vllm` engine's options hold these keys)."""

    gpu_memory_utilization: float = 0.3
    """GPU only: fraction of GPU memory vLLM may take (weights + KV cache); a colocated trainer uses the rest."""
    tensor_parallel_size: int = 1
    """GPUs per vLLM engine; colocated, it must divide the trainer's world size (torchrun ranks)."""
    dtype: str = "auto"
    """Weight dtype inside vLLM: auto (the checkpoint's), bfloat16, float16 or float32."""
    max_model_len: int | None = None
    """Longest prompt + completion in tokens; None = the model's maximum."""
    max_num_seqs: int | None = None
    """Most sequences vLLM schedules at once; None = vLLM's default."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of the shared prompt across the samples of a prompt."""
    enforce_eager: bool | None = None
    """Skip graph capture / compilation; None = eager on CPUs (compiling took ~2 min of start-up and
    gained nothing measurable on SmolLM2), graphs on GPUs."""
    cpu_kvcache_space_gib: int | None = None
    """CPU only: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE); None = that variable, else 2."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments passed verbatim to `vllm.LLM`."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "VLLMOptions":
        """Build from a dict; unknown keys are an error naming them."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown vllm options {unknown}; known: {sorted(known)} (use `extra` for others)")
        return cls(**data)


def vllm_cpu_build() -> bool:
    """True when the installed vLLM is the `vllm-cpu` distribution."""
    try:
        importlib.metadata.version("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def vllm_available() -> bool:
    """True when vllm imports and can run here: the CPU build, or a CUDA build with a GPU visible."""
    if importlib.util.find_spec("vllm") is None:
        return False
    if vllm_cpu_build():
        return True
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


def build_llm(model_path: str | os.PathLike, options: VLLMOptions, seed: int = 0, colocated: bool = False) -> Any:
    """A `vllm.LLM` in this process. `colocated` (GPU): share the trainer's ranks through vLLM's
    external launcher, each tensor-parallel group seeded alike."""
    import torch

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    cuda = torch.cuda.is_available() and not vllm_cpu_build()
    opts = asdict(options)
    extra, kv_gib = opts.pop("extra"), opts.pop("cpu_kvcache_space_gib")
    if cuda:
        kwargs: dict[str, Any] = {}
        if colocated:
            _distributed_env()
            world = int(os.environ["WORLD_SIZE"])
            if world % options.tensor_parallel_size:
                raise ValueError(f"tensor_parallel_size {options.tensor_parallel_size} must divide world size {world}")
            kwargs["distributed_executor_backend"] = "external_launcher"
            seed += int(os.environ["RANK"]) // options.tensor_parallel_size
    else:
        opts.pop("gpu_memory_utilization")
        opts["enforce_eager"] = True if options.enforce_eager is None else options.enforce_eager
        if kv_gib is not None:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_gib))  # vLLM reads whole GiB
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        kwargs = {}
    from vllm import LLM

    return LLM(model=str(model_path), seed=seed, logprobs_mode="processed_logprobs",
               **{k: v for k, v in opts.items() if v is not None}, **kwargs, **extra)


def push_weights(llm: Any, weights: Iterable[tuple[str, Any]]) -> None:
    """Load (name, tensor) pairs in checkpoint naming into the running model, then drop the prefix cache."""
    import torch

    with torch.no_grad():
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
    llm.reset_prefix_cache()


def _generation_config(path: str | os.PathLike) -> Any:
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(path)
    except (OSError, ValueError):
        return None


class VLLMEngine:
    """vLLM behind the Engine interface (see the module docstring)."""

    name = "vllm"

    def __init__(self, model: str | os.PathLike | None, seed: int = 0, colocated: bool = False, **options: Any):
        """Load the model folder `model`; `options` are VLLMOptions fields (unknown ones are an error)."""
        if model is None:
            raise ValueError("the vllm engine needs a model folder")
        if not vllm_available():
            raise RuntimeError(
                "engine vllm needs vllm: on a CUDA GPU the [gpu] extra (pip install 'cascade-platform[gpu]'), "
                "on CPUs the vllm-cpu build (`make vllm-cpu`, then run under .venv-vllm/bin/python)")
        self.options = VLLMOptions.from_dict(options)
        self.llm = build_llm(model, self.options, seed=seed, colocated=colocated)
        self.tokenizer = self.llm.get_tokenizer()
        self.stop_ids = stop_token_ids(self.tokenizer, _generation_config(model))
        self.context_length: int = self.llm.llm_engine.model_config.max_model_len
        self._cuda = not vllm_cpu_build()

    @property
    def version(self) -> str:
        import torch
        import vllm

        build = "vllm-cpu" if vllm_cpu_build() else "vllm"
        return f"{build}{vllm.__version__}-torch{torch.__version__}"

    def generate(self, requests: Sequence[Request], sampling: Sampling, samples: int = 1) -> list[list[Sample]]:
        """`samples` completions per request; raises PromptTooLong before sampling any."""
        from vllm import SamplingParams

        prompts = checked_prompt_ids(self.tokenizer, requests, sampling, samples, self.context_length)
        if not prompts:
            return []
        greedy = sampling.temperature < GREEDY_BELOW
        params = SamplingParams(
            n=1 if greedy else samples,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            stop_token_ids=self.stop_ids,
            ignore_eos=not self.stop_ids,  # emptied stop_ids: fixed-length samples, as in the hf engine
            logprobs=0 if sampling.logprobs else None,
            detokenize=False,  # decoded below, exactly as the hf engine decodes
        )
        batch = [{"prompt_token_ids": p} for p in prompts]
        device = None
        if self._cuda:
            import torch

            device = torch.device("cuda", torch.cuda.current_device())
        with seeded(sampling.seed, device):
            outputs = self.llm.generate(batch, sampling_params=params, use_tqdm=False)
        return [self._samples(i, out, samples, sampling.logprobs, greedy) for i, out in enumerate(outputs)]

    def _samples(self, index: int, output: Any, k: int, logprobs: bool, greedy: bool) -> list[Sample]:
        completions = sorted(output.outputs, key=lambda c: c.index)
        if greedy:
            completions = completions[:1] * k
        odd = {c.finish_reason for c in completions} - {"stop", "length"}
        if odd:  # aborted or unfinished: not a sample to hand on
            raise RuntimeError(f"vLLM did not finish request {index}: finish_reason {sorted(map(str, odd))}")
        result = []
        for k_index, c in enumerate(completions):
            ids = list(c.token_ids)
            lps = None
            if logprobs and c.logprobs is not None:
                lps = [step[tok].logprob for tok, step in zip(ids, c.logprobs)]
            result.append(Sample(request_index=index, sample_index=k_index,
                                 text=self.tokenizer.decode(ids, skip_special_tokens=True), token_ids=ids,
                                 finish_reason="length" if c.finish_reason == "length" else "stop", logprobs=lps))
        return result

    def sync_weights(self, model: Any) -> None:
        """Push a torch module's current parameters (DeepSpeed / DDP wrappers unwrapped) into vLLM."""
        unwrapped = getattr(model, "module", model)
        push_weights(self.llm, unwrapped.state_dict().items())

    def close(self) -> None:
        """Free the engine (unusable afterwards) and, on a GPU, its cached memory."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        del llm
        gc.collect()
        if self._cuda:
            import torch

            torch.cuda.empty_cache()


__all__ = ["VLLMEngine", "VLLMOptions", "build_llm", "push_weights", "vllm_available",
           "vllm_cpu_build"]
