"""DeepSpeed backend: 2 CPU ranks (gloo) through torchrun: ZeRO-2 SFT, ZeRO-3 GRPO, ZeRO-1 GRPO killed and resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from trainer.config import GRPOConfig, SFTConfig
from trainer.stage import run_stage


@pytest.mark.slow
def test_zero2_sft_matches_single_process(sft_kwargs, tmp_path):
    common = {**sft_kwargs, "max_steps": 2, "batch_size": 2, "packing": False}
    single = run_stage(SFTConfig(**{**common, "output_dir": str(tmp_path / "single"), "batch_size": 4}))
    ds = run_stage(SFTConfig(**{**common, "output_dir": str(tmp_path / "ds"), "backend": "deepspeed",
                              "deepspeed": {"zero_stage": 2, "num_processes": 2}}))
    # 2 ranks x 2 rows = the single process's 4 rows: the same global step.
    a, b = load_file(single.output_dir / "model.safetensors"), load_file(ds.output_dir / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=2e-5, rtol=1e-3)
    assert json.loads(ds.lineage_path.read_text())["backend"] == "deepspeed"
    assert not (ds.output_dir / ".deepspeed_launch.json").exists()


@pytest.mark.slow
def test_zero3_grpo_two_ranks(grpo_kwargs, tmp_path):
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "backend": "deepspeed", "save_steps": 1,
                                    "deepspeed": {"zero_stage": 3, "num_processes": 2}}))
    rows = pq.read_table(result.metrics_path).to_pylist()
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["grad_norm"] > 0
    weights = load_file(result.output_dir / "model.safetensors")
    before = load_file(f"{grpo_kwargs['policy']}/model.safetensors")
    assert all(weights[k].shape == before[k].shape for k in before)
    assert any(not torch.equal(weights[k], before[k]) for k in before)


def _processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text` (the launch spec names its output folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_zero1_grpo_kill9_takes_the_ranks_down_and_resumes_bit_identical(grpo_kwargs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    base = {**grpo_kwargs, "backend": "deepspeed", "max_steps": 4, "save_steps": 1, "seed": 11,
            "deepspeed": {"zero_stage": 1, "num_processes": 2}}
    reference = run_stage(GRPOConfig(**{**base, "output_dir": str(tmp_path / "ref")}))
    out = tmp_path / "killed"
    config = tmp_path / "killed.yaml"
    config.write_text(yaml.safe_dump({**base, "output_dir": str(out)}))
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "trainer.cli", "grpo", "--config", str(config)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    spec = str(out / ".deepspeed_launch.json")
    cli = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (out / "checkpoints" / "step_2").exists() and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(cli.pid, signal.SIGKILL)  # only the CLI: torchrun and the ranks must follow it
        cli.wait()
        assert not (out / "lineage.json").exists(), "the run finished before it could be killed"
        deadline = time.monotonic() + 10  # SIGKILL reaches torchrun and the ranks at once
        while _processes_mentioning(spec) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_mentioning(spec) == [], "ranks outlived the killed CLI"
        assert not (out / "lineage.json").exists(), "orphaned ranks finished the run"
    finally:
        for pid in _processes_mentioning(spec):
            os.kill(pid, signal.SIGKILL)
    resumed = subprocess.run([*cmd, "--resume"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lineage = json.loads((out / "lineage.json").read_text())
    assert lineage["summary"]["resumed_from_step"] >= 2
    a, b = load_file(reference.output_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
