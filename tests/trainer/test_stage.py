"""Stage contract: no overwrite, NaN stops with the last checkpoint kept, exact in-process resume."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from spec.nonfinite import NonFiniteLossError
from trainer.config import SFTConfig
from trainer.stage import OutputExistsError, run_stage


def test_finished_output_is_never_overwritten(sft_kwargs):
    cfg = SFTConfig(**{**sft_kwargs, "max_steps": 1})
    first = run_stage(cfg)
    stamp = (first.output_dir / "model.safetensors").stat().st_mtime_ns
    again = run_stage(cfg.model_copy(update={"resume": True}))  # same config: the existing result
    assert again.output_dir == first.output_dir
    assert (first.output_dir / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(OutputExistsError, match="different config"):
        run_stage(SFTConfig(**{**sft_kwargs, "max_steps": 2}))


def test_unfinished_output_needs_resume(sft_kwargs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stray.txt").write_text("x")
    with pytest.raises(OutputExistsError, match="resume"):
        run_stage(SFTConfig(**sft_kwargs))


def test_nan_loss_stops_and_keeps_last_checkpoint(sft_kwargs, monkeypatch):
    import trainer.sft as sft

    real = sft.target_logprobs
    calls = {"n": 0}

    def poisoned(backend, batch, **kw):
        calls["n"] += 1
        logp, ent = real(backend, batch, **kw)
        return (logp * float("nan"), ent) if calls["n"] > 2 else (logp, ent)

    monkeypatch.setattr(sft, "target_logprobs", poisoned)
    cfg = SFTConfig(**{**sft_kwargs, "max_steps": 4, "save_steps": 1, "batch_size": 2})
    with pytest.raises(NonFiniteLossError, match="step 3"):
        run_stage(cfg)
    out = cfg.output_dir
    ckpts = sorted(p.name for p in (__import__("pathlib").Path(out) / "checkpoints").iterdir())
    assert ckpts == ["step_1", "step_2"]
    weights = load_file(f"{out}/checkpoints/step_2/model/model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())
    assert not (__import__("pathlib").Path(out) / "lineage.json").exists()


def test_resume_after_crash_is_bit_identical(sft_kwargs, tmp_path, monkeypatch):
    import trainer.sft as sft

    base = {**sft_kwargs, "max_steps": 5, "save_steps": 2, "batch_size": 3}
    reference = run_stage(SFTConfig(**{**base, "output_dir": str(tmp_path / "ref")}))

    real_step = sft.SFTTrainer.train_step

    def crash_at_4(self, step):
        if step == 3:
            raise KeyboardInterrupt("simulated crash")
        return real_step(self, step)

    monkeypatch.setattr(sft.SFTTrainer, "train_step", crash_at_4)
    cfg = SFTConfig(**{**base, "output_dir": str(tmp_path / "crash")})
    with pytest.raises(KeyboardInterrupt):
        run_stage(cfg)
    monkeypatch.setattr(sft.SFTTrainer, "train_step", real_step)
    resumed = run_stage(cfg.model_copy(update={"resume": True}))
    a = load_file(reference.output_dir / "model.safetensors")
    b = load_file(resumed.output_dir / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.summary["resumed_from_step"] == 2
    import pyarrow.parquet as pq

    ref_loss = pq.read_table(reference.metrics_path).column("loss").to_pylist()
    assert pq.read_table(resumed.metrics_path).column("loss").to_pylist() == ref_loss


def test_auto_precision_is_bf16_only_where_the_hardware_has_it(monkeypatch):
    from trainer.backend_api import native_bf16, resolve_dtype

    cpu = torch.device("cpu")
    assert resolve_dtype("fp32", cpu) is None and resolve_dtype("bf16", cpu) is torch.bfloat16
    assert resolve_dtype("auto", cpu) is (torch.bfloat16 if native_bf16("cpu") else None)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert resolve_dtype("auto", cpu) is None  # emulated bf16 is slower than fp32: keep fp32
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert resolve_dtype("auto", cpu) is torch.bfloat16
