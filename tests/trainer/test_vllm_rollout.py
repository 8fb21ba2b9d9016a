"""VLLMRolloutEngine: options parsing everywhere; generation and weight push only with CUDA + vllm."""

from __future__ import annotations

import pytest

from trainer.rollout import RolloutEngine
from trainer.rollout_vllm import VLLMOptions, VLLMRolloutEngine, vllm_available


def test_options_from_dict_rejects_unknown_keys():
    opts = VLLMOptions.from_dict({"gpu_memory_utilization": 0.5, "tensor_parallel_size": 2})
    assert opts.gpu_memory_utilization == 0.5 and opts.tensor_parallel_size == 2
    with pytest.raises(ValueError, match="gpu_mem"):
        VLLMOptions.from_dict({"gpu_mem": 0.5})


@pytest.mark.skipif(vllm_available(), reason="checks the CPU error path")
def test_engine_refuses_clearly_without_gpu(tiny_model_dir):
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        VLLMRolloutEngine(tiny_model_dir, tokenizer=None)


@pytest.mark.gpu
def test_vllm_generate_and_weight_push(tiny_model_dir):
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    engine = VLLMRolloutEngine(tiny_model_dir, tok, {"gpu_memory_utilization": 0.2, "enforce_eager": True,
                                                      "max_model_len": 512, "dtype": "float32"}, seed=0)
    try:
        assert isinstance(engine, RolloutEngine)
        prompts = [tok("<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n<|im_start|>assistant\n")["input_ids"],
                   tok("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")["input_ids"]]
        groups = engine.generate(prompts, num_generations=3, max_new_tokens=12, temperature=1.0, seed=1,
                                 return_logprobs=True)
        assert [len(g) for g in groups] == [3, 3]
        for i, group in enumerate(groups):
            for r in group:
                assert r.prompt_index == i and 0 < len(r.token_ids) <= 12
                assert len(r.logprobs) == len(r.token_ids) and all(lp <= 0 for lp in r.logprobs)
                assert r.truncated == (r.token_ids[-1] not in engine.stop_ids)
        before = engine.generate(prompts, 1, 12, temperature=1e-6, seed=0)
        # Greedy tokens from vLLM match HF greedy decoding of the same weights.
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).cuda()
        ids = torch.tensor([prompts[0]], device="cuda")
        hf = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=engine.stop_ids)[0, ids.shape[1]:]
        assert before[0][0].token_ids[:4] == hf.tolist()[:4]
        # Pushing changed weights changes what vLLM samples.
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(3.0)
        engine.sync_weights(model)
        after = engine.generate(prompts, 1, 12, temperature=1e-6, seed=0)
        assert [g[0].token_ids for g in after] != [g[0].token_ids for g in before]
    finally:
        engine.close()
