"""VLLMRolloutEngine: options parsing everywhere; generation and weight push only with CUDA + vllm;
benchmarks/gpu_check.py: its GPU-free checks everywhere, the full run only on a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from generation.vllm_engine import VLLMOptions, vllm_available
from trainer.rollout import RolloutEngine
from trainer.rollout_vllm import VLLMRolloutEngine
from tests.script_module import load_script


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


# -- benchmarks/gpu_check.py (issue 18, part 5): runs on a GPU, checks itself everywhere else -------

GPU_CHECK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def _gpu_check_module():
    return load_script(GPU_CHECK)


def test_gpu_check_stops_clearly_without_a_gpu(tmp_path, capsys):
    check = _gpu_check_module()
    if check.require_gpu() is None:
        pytest.skip("this machine can run the GPU check")
    assert check.main(["--out", str(tmp_path)]) == 2
    assert "gpu_check: cannot run:" in capsys.readouterr().err


@pytest.mark.slow
def test_gpu_check_dry_run_builds_both_configs(tmp_path, cascade_home, tiny_model_dir):
    done = subprocess.run([sys.executable, str(GPU_CHECK), "--dry-run", "--steps", "2", "--prompts", "2",
                           "--generations", "2", "--policy", str(tiny_model_dir), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("GPU_CHECK_JSON "))[15:])
    assert plan["ours"]["backend"] == "deepspeed" and plan["ours"]["zero_stage"] == 2
    assert plan["trl"]["use_vllm"] and plan["trl"]["vllm_mode"] == "colocate"
    assert plan["trl"]["per_device_train_batch_size"] == 4 and plan["prompt_tokens_mean"] > 0


@pytest.mark.gpu
def test_gpu_check_runs_within_budget(tmp_path, cascade_home):
    check = _gpu_check_module()
    if check.require_gpu() is not None:
        pytest.skip(f"GPU check cannot run here: {check.require_gpu()}")
    done = subprocess.run([sys.executable, str(GPU_CHECK), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["engine"]["sync_ok"]
    assert len(report["ours"]["steps"]) == len(report["trl"]["steps"]) == 4
    assert report["ratio_step_time_ours_over_trl"] > 0
