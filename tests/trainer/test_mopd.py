"""MOPD: the loss on hand-computed tensors (advantage sign, importance window, stop-gradients),
a student equal to its teacher gets zero advantage, teacher routing, and a real stage run."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from curation.schemas import RL_SCHEMA
from trainer.mopd import MOPDConfig, MOPDTrainer, mopd_loss, teacher_key
from trainer.stage import run_stage


def _tensors():
    # Four tokens. Importance ratios r = exp(train - inf): 1, 3 (above 2), 0.4 (below 0.5), 1.5.
    train = torch.tensor([-1.0, -2.0, -0.5, -1.2], requires_grad=True)
    teacher = torch.tensor([-0.5, -2.5, -0.1, -1.7], requires_grad=True)
    inf = torch.tensor([-1.0, -2.0 - math.log(3.0), -0.5 - math.log(0.4), -1.2 - math.log(1.5)])
    return train, teacher, inf


def test_loss_matches_hand_computation_and_window():
    train, teacher, inf = _tensors()
    loss, terms = mopd_loss(train, teacher, inf, n_valid=8, low=0.5, high=2.0)
    # a = teacher - train: +0.5 (teacher prefers the token), -0.5, +0.4, -0.5.
    assert terms["adv"].tolist() == pytest.approx([0.5, -0.5, 0.4, -0.5])
    assert terms["ratio"].tolist() == pytest.approx([1.0, 3.0, 0.4, 1.5], rel=1e-5)
    assert terms["clipped"].tolist() == [False, True, True, False]
    # loss = -(1/|V|) Σ w a logπ over the two tokens inside the window, |V| = 8.
    expected = -(1.0 * 0.5 * -1.0 + 1.5 * -0.5 * -1.2) / 8
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)


def test_gradients_stop_at_advantage_and_weight():
    train, teacher, inf = _tensors()
    loss, _ = mopd_loss(train, teacher, inf, n_valid=8)
    loss.backward()
    # d loss / d logπ_t = -w_t a_t / |V|: no term from a_t or w_t depending on logπ.
    assert train.grad.tolist() == pytest.approx([-0.5 / 8, 0.0, 0.0, -1.5 * -0.5 / 8], rel=1e-5)
    assert teacher.grad is None  # the teacher only scores
    # Sign: gradient descent raises log π where the teacher prefers the token, lowers it elsewhere.
    assert train.grad[0] < 0 < train.grad[3]


def test_window_bounds_are_inclusive_and_configurable():
    train = torch.tensor([0.0, 0.0], requires_grad=True)
    inf = torch.tensor([math.log(2.0), -math.log(2.0)])  # ratios 0.5 and 2: both on the edges
    _, terms = mopd_loss(train, torch.tensor([1.0, 1.0]), inf, n_valid=2)
    assert terms["clipped"].tolist() == [False, False]
    _, terms = mopd_loss(train, torch.tensor([1.0, 1.0]), inf, n_valid=2, low=0.8, high=1.25)
    assert terms["clipped"].tolist() == [True, True]


def test_teacher_routing():
    teachers = {"math": "a", "default": "b"}
    assert teacher_key("math", teachers) == "math" and teacher_key("chat", teachers) == "default"
    with pytest.raises(KeyError, match="no teacher for domain 'chat'"):
        teacher_key("chat", {"math": "a"})


@pytest.fixture
def mopd_parquet(tmp_path):
    rows = [{"row_id": str(i), "source": "t", "domain": "math" if i % 2 else "chat", "mode": "no_think",
             "prompt": f"What is {i} plus {i + 3}?", "answer": str(2 * i + 3)} for i in range(8)]
    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=RL_SCHEMA), path)
    return path


def _kwargs(tiny_model_dir, mopd_parquet, tmp_path, teachers, name="out"):
    return dict(policy=str(tiny_model_dir), dataset=str(mopd_parquet), output_dir=str(tmp_path / name),
                teachers=teachers, max_steps=2, prompts_per_step=2, num_generations=2, max_new_tokens=8,
                learning_rate=1e-3, seed=3, tensorboard=False, dtype="fp32")


def test_student_equal_to_teacher_gets_zero_advantage(tiny_model_dir, mopd_parquet, tmp_path, cascade_home):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.torch_backend import TorchBackend

    cfg = MOPDConfig(**_kwargs(tiny_model_dir, mopd_parquet, tmp_path, {"default": str(tiny_model_dir)}))
    tok = AutoTokenizer.from_pretrained(cfg.policy)
    trainer = MOPDTrainer(cfg, tok)
    trainer.attach(TorchBackend(AutoModelForCausalLM.from_pretrained(cfg.policy), cfg, 2, 0))
    before = {k: v.clone() for k, v in trainer.backend.model.state_dict().items()}
    metrics = trainer.train_step(0)
    assert metrics["tokens"] > 0
    assert metrics["adv_mean"] == pytest.approx(0.0, abs=1e-5) and metrics["adv_max"] == pytest.approx(0.0, abs=1e-5)
    assert metrics["reverse_kl/default"] == pytest.approx(0.0, abs=1e-5)
    assert metrics["clipped_frac"] == 0.0  # same weights sample and train: ratio ~1
    assert metrics["grad_norm"] == pytest.approx(0.0, abs=1e-6)
    after = trainer.backend.model.state_dict()
    assert all(torch.allclose(before[k], after[k], atol=1e-7) for k in before)


def test_stage_run_routes_domains_to_teachers(tiny_model_dir, mopd_parquet, tmp_path, cascade_home):
    from trainer.models import make_tiny_model

    other = make_tiny_model(tmp_path / "teacher", seed=7)  # same tokenizer, other weights
    result = run_stage(MOPDConfig(**_kwargs(tiny_model_dir, mopd_parquet, tmp_path,
                                           {"math": str(other), "chat": str(tiny_model_dir)})))
    import polars as pl

    df = pl.read_parquet(result.metrics_path)
    assert df.height == 2
    last = df.to_dicts()
    # The chat teacher is the starting policy (KL 0 at step 0); the math teacher differs.
    assert last[0]["reverse_kl/chat"] == pytest.approx(0.0, abs=1e-5)
    assert abs(last[0]["reverse_kl/math"]) > 1e-3  # a sampled estimate: noisy, may be negative on few tokens
    assert all(0.0 <= r["clipped_frac"] <= 1.0 for r in last)
    assert result.summary["prompts_per_teacher"] == {"chat": 4, "math": 4}
    assert (result.output_dir / "model.safetensors").exists()


def test_missing_teacher_fails_before_training(tiny_model_dir, mopd_parquet, tmp_path, cascade_home):
    from transformers import AutoTokenizer

    cfg = MOPDConfig(**_kwargs(tiny_model_dir, mopd_parquet, tmp_path, {"math": str(tiny_model_dir)}))
    with pytest.raises(KeyError, match="no teacher for domain 'chat'"):
        MOPDTrainer(cfg, AutoTokenizer.from_pretrained(cfg.policy))
