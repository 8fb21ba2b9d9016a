"""kill -9 in the middle of a GRPO stage, rerun with --resume: bit-identical final weights."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from tests.trainer.conftest import LENGTH


def _config(path: Path, out: Path, policy: Path, dataset: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "policy": str(policy), "dataset": str(dataset), "output_dir": str(out), "rewards": [LENGTH],
        "max_steps": 6, "save_steps": 1, "seed": 11, "prompts_per_step": 2, "num_generations": 4,
        "max_new_tokens": 12, "learning_rate": 1e-3, "torch_threads": 1, "tensorboard": False,
        "dtype": "fp32"}))
    return path


def _run(config: Path, *extra: str, kill_after_checkpoint: Path | None = None) -> int:
    cmd = [sys.executable, "-m", "trainer.cli", "grpo", "--config", str(config), *extra]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})
    try:
        if kill_after_checkpoint is not None:
            deadline = time.monotonic() + 300
            while not kill_after_checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_kill9_then_resume_is_bit_identical(tiny_model_dir, rl_parquet, tmp_path, cascade_home):
    ref_cfg = _config(tmp_path / "ref.yaml", tmp_path / "ref", tiny_model_dir, rl_parquet)
    assert _run(ref_cfg) == 0
    out = tmp_path / "killed"
    cfg = _config(tmp_path / "killed.yaml", out, tiny_model_dir, rl_parquet)
    rc = _run(cfg, kill_after_checkpoint=out / "checkpoints" / "step_2")
    assert rc == -signal.SIGKILL
    assert not (out / "lineage.json").exists(), "the run finished before it could be killed"
    # Without --resume the unfinished folder is refused rather than overwritten.
    assert _run(cfg) != 0
    assert _run(cfg, "--resume") == 0
    a, b = load_file(tmp_path / "ref" / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
