"""DeepSpeed backend: 2 CPU ranks (gloo) through torchrun, ZeRO-2 SFT and ZeRO-3 GRPO."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from trainer.config import GRPOConfig, SFTConfig
from trainer.stage import run_grpo, run_sft


@pytest.mark.slow
def test_zero2_sft_matches_single_process(sft_kwargs, tmp_path):
    common = {**sft_kwargs, "max_steps": 2, "batch_size": 2, "packing": False}
    single = run_sft(SFTConfig(**{**common, "output_dir": str(tmp_path / "single"), "batch_size": 4}))
    ds = run_sft(SFTConfig(**{**common, "output_dir": str(tmp_path / "ds"), "backend": "deepspeed",
                              "deepspeed": {"zero_stage": 2, "num_processes": 2}}))
    # 2 ranks x 2 rows = the single process's 4 rows: the same global step.
    a, b = load_file(single.output_dir / "model.safetensors"), load_file(ds.output_dir / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=2e-5, rtol=1e-3)
    assert json.loads(ds.lineage_path.read_text())["backend"] == "deepspeed"
    assert not (ds.output_dir / ".deepspeed_launch.json").exists()


@pytest.mark.slow
def test_zero3_grpo_two_ranks(grpo_kwargs, tmp_path):
    result = run_grpo(GRPOConfig(**{**grpo_kwargs, "backend": "deepspeed", "save_steps": 1,
                                    "deepspeed": {"zero_stage": 3, "num_processes": 2}}))
    rows = pq.read_table(result.metrics_path).to_pylist()
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["grad_norm"] > 0
    weights = load_file(result.output_dir / "model.safetensors")
    before = load_file(f"{grpo_kwargs['policy']}/model.safetensors")
    assert all(weights[k].shape == before[k].shape for k in before)
    assert any(not torch.equal(weights[k], before[k]) for k in before)
