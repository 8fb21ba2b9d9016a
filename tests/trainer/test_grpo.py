"""GRPO: advantages, the loss against a naive reference, filtering, failing rewards, metrics."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from trainer.checkpointing import DataOrder
from trainer.config import GRPOConfig
from trainer.grpo import GRPOTrainer, group_advantages
from trainer.stage import run_stage

FAKE = "tests.trainer.fake_rewards:"


def test_group_advantages():
    adv, zero = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv == [1.0, -1.0, -1.0, 1.0] and not zero
    assert group_advantages([0.5] * 4) == ([0.0] * 4, True)
    adv, _ = group_advantages([3.0, 1.0], transform="tanh")
    assert adv[0] == pytest.approx(0.7615941559557649) and adv[1] == pytest.approx(-adv[0])


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_loss_gradient_matches_naive_policy_gradient(grpo_kwargs, aggregation):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.torch_backend import TorchBackend

    cfg = GRPOConfig(**{**grpo_kwargs, "loss_aggregation": aggregation})
    tok = AutoTokenizer.from_pretrained(cfg.policy)
    model = AutoModelForCausalLM.from_pretrained(cfg.policy)
    trainer = GRPOTrainer(cfg, tok)
    trainer.attach(TorchBackend(model, cfg, 1, 0))
    # Rows as the trainer builds them: one prompt computed once for the completions sharing it.
    rows = [([5, 6, 7], [[8, 9, 10, 11], [8, 3]], [1.5, -1.0]), ([5, 6], [[12, 13]], [-0.5]),
            ([4, 7, 7, 7], [[20], [21, 22, 23]], [0.25, 2.0])]
    seqs = [(p, c, a) for p, cs, advs in rows for c, a in zip(cs, advs)]
    n_tok, n_seq = float(sum(len(c) for _, c, _ in seqs)), float(len(seqs))
    loss, _ = trainer._loss(rows, 0, 0, {}, n_tok, n_seq)
    loss.backward()
    ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    naive = 0.0
    for prompt, completion, adv in seqs:
        ids = torch.tensor([prompt + completion])
        logp = model(ids).logits[0, len(prompt) - 1:-1].log_softmax(-1)
        taken = logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
        weight = 1 / n_tok if aggregation == "token" else 1 / (len(completion) * n_seq)
        naive = naive - (adv * taken * weight).sum()
    naive.backward()
    # The ratio form's value is -sum(A * w) (ratio = 1); its gradient is the policy gradient.
    weights = [1 / n_tok] * len(seqs) if aggregation == "token" else [1 / (len(c) * n_seq) for _, c, _ in seqs]
    assert float(loss.detach()) == pytest.approx(-sum(a * len(c) * w for (_, c, a), w in zip(seqs, weights)), rel=1e-5)
    for a, p in zip(ours, model.parameters()):
        torch.testing.assert_close(a, p.grad, atol=1e-6, rtol=1e-4)


def test_grpo_stage_metrics_and_lineage(grpo_kwargs):
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "rewards": [FAKE + "LengthReward", {"name": FAKE + "DigitReward", "weight": 0.5}],
                                    "temperature_schedule": [[1, 0.7]]}))
    rows = pq.read_table(result.metrics_path).to_pylist()
    assert [r["step"] for r in rows] == [0, 1]
    expected = {"reward_mean", "reward_std", "zero_var_frac", "completion_len_mean", "completion_len_max",
                "truncated_frac", "entropy", "grad_norm", "lr", "time_generation_s", "time_reward_s",
                "time_training_s", "tokens_per_s", f"reward/{FAKE}LengthReward/mean",
                f"reward/{FAKE}DigitReward/std", f"reward_failures/{FAKE}DigitReward"}
    assert expected <= set(rows[0])
    assert [r["temperature"] for r in rows] == [1.0, 0.7]
    assert [r["think_frac"] for r in rows] == [0.5, 0.5]  # the fixture's prompts alternate modes
    assert rows[0]["grad_norm"] > 0 and rows[0]["entropy"] > 0
    lineage = result.lineage_path.read_text()
    assert '"version": "1"' in lineage and '"weight": 0.5' in lineage
    assert (result.output_dir / "model.safetensors").exists()


def test_zero_variance_groups_are_filtered_and_weights_stay(grpo_kwargs, tiny_model_dir):
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "rewards": [FAKE + "ConstantReward"], "max_steps": 1,
                                    "dynamic_filtering": True, "refill": True, "max_refill_rounds": 1}))
    (row,) = pq.read_table(result.metrics_path).to_pylist()
    assert row["zero_var_frac"] == 1.0 and row["trained_rollouts"] == 0 and row["refill_rounds"] == 1
    before = load_file(tiny_model_dir / "model.safetensors")
    after = load_file(result.output_dir / "model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_refill_prompts_sample_whole_rounds(grpo_kwargs):
    """refill_prompts: every round of a refilled step samples that many prompts (here 3 where the step
    needs 2), so two rounds without signal filter 6 groups, not 4; a step never trains more groups
    than prompts_per_step."""
    base = {**grpo_kwargs, "max_steps": 1, "dynamic_filtering": True, "refill": True, "max_refill_rounds": 1}
    for extra, groups in (({}, 4), ({"refill_prompts": 3}, 6)):
        result = run_stage(GRPOConfig(**{**base, **extra, "rewards": [FAKE + "ConstantReward"],
                                         "output_dir": f"{base['output_dir']}_{groups}"}))
        (row,) = pq.read_table(result.metrics_path).to_pylist()
        assert (row["filtered_groups"], row["refill_rounds"], row["trained_rollouts"]) == (groups, 1, 0)
    # With a signal in all 3 groups of the first round, the step keeps the 2 it needs.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.torch_backend import TorchBackend
    from trainer.grpo import STEP_LISTS

    cfg = GRPOConfig(**{**base, "refill_prompts": 3, "overlong_filtering": False})
    trainer = GRPOTrainer(cfg, AutoTokenizer.from_pretrained(cfg.policy))
    trainer.attach(TorchBackend(AutoModelForCausalLM.from_pretrained(cfg.policy), cfg, 1, 0))
    collected: dict[str, list] = {k: [] for k in STEP_LISTS}
    kept = trainer._collect(0, cfg.max_new_tokens, 1.0, collected)
    assert collected["zero_var"] == [0, 0, 0] and len(kept) == cfg.prompts_per_step == 2


def test_failing_reward_is_recorded_not_fatal(grpo_kwargs):
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "max_steps": 1,
                                    "rewards": [FAKE + "ExplodingReward", FAKE + "LengthReward"]}))
    (row,) = pq.read_table(result.metrics_path).to_pylist()
    assert row[f"reward_failures/{FAKE}ExplodingReward"] == 8
    assert row["trained_rollouts"] > 0


def test_hanging_reward_times_out_into_recorded_failures(grpo_kwargs):
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "max_steps": 1, "reward_timeout_s": 0.5,
                                    "rewards": [FAKE + "HangingReward", FAKE + "LengthReward"]}))
    (row,) = pq.read_table(result.metrics_path).to_pylist()
    assert row[f"reward_failures/{FAKE}HangingReward"] == 8 and row[f"reward_failures/{FAKE}LengthReward"] == 0
    assert row["trained_rollouts"] > 0 and (result.output_dir / "model.safetensors").exists()


def test_a_group_whose_signal_is_only_in_truncated_rollouts_has_none():
    from trainer.grpo import carries_signal
    from trainer.rollout import Rollout

    def rollout(truncated: bool, tokens: int = 3) -> Rollout:
        return Rollout(prompt_index=0, text="x", token_ids=list(range(tokens)), truncated=truncated)

    adv = [1.0, 1.0, -3.0, 1.0]
    all_cut = [rollout(True) for _ in adv]
    assert not carries_signal(all_cut, adv, overlong_filtering=True)  # the loss keeps none of them
    assert carries_signal(all_cut, adv, overlong_filtering=False)
    one_kept = [rollout(True), rollout(True), rollout(False), rollout(True)]
    assert carries_signal(one_kept, adv, overlong_filtering=True)
    assert not carries_signal(one_kept, [1.0, 1.0, 0.0, -2.0], overlong_filtering=True)  # kept one has advantage 0
    assert not carries_signal([rollout(False, tokens=0)] * 4, adv, overlong_filtering=True)  # empty completions


def test_overlong_rollouts_are_excluded(grpo_kwargs):
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "max_steps": 1, "max_new_tokens": 2}))
    (row,) = pq.read_table(result.metrics_path).to_pylist()
    truncated = round(row["truncated_frac"] * 8)
    assert truncated > 0 and row["trained_rollouts"] <= 8 - truncated
    # With dynamic filtering, groups whose reward differences sit only in truncated rollouts are
    # filtered like zero-variance groups (nothing trained), not kept to train on nothing.
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "max_steps": 1, "max_new_tokens": 1, "dynamic_filtering": True,
                                    "output_dir": str(result.output_dir) + "_filtered"}))
    (row,) = pq.read_table(result.metrics_path).to_pylist()
    assert row["truncated_frac"] == 1.0 and row["zero_var_frac"] == 1.0 and row["trained_rollouts"] == 0


def test_data_order_interleaves_strata():
    labels = ["think"] * 10 + ["no_think"] * 6
    order = DataOrder(16, seed=5, strata=labels)
    first, second = order.take(16), order.take(16)
    assert sorted(first) == sorted(second) == list(range(16)) and first != second  # one permutation per epoch
    assert all(labels[a] != labels[b] for a, b in zip(first[:12:2], first[1:12:2]))  # pairs while both last
    resumed = DataOrder(16, seed=5, strata=labels)
    resumed.load_state_dict({"epoch": 0, "position": 7})
    assert resumed.take(9) + resumed.take(16) == first[7:] + second
    # One label (or none) keeps the plain shuffle, so single-mode runs keep their data order.
    assert DataOrder(16, 5, strata=["x"] * 16).take(16) == DataOrder(16, 5).take(16)


@pytest.mark.parametrize("balance", [True, False])
def test_mixed_mode_prompt_sets_give_half_think_steps(grpo_kwargs, balance):
    from transformers import AutoTokenizer

    cfg = GRPOConfig(**{**grpo_kwargs, "balance_modes": balance})
    trainer = GRPOTrainer(cfg, AutoTokenizer.from_pretrained(cfg.policy))
    steps = [[trainer.modes[i] for i in trainer.order.take(2)] for _ in range(8)]
    balanced = [sorted(s) == ["no_think", "think"] for s in steps]
    assert all(balanced) if balance else not all(balanced)  # seed 3's plain shuffle pairs two alike


def test_retired_items_leave_later_epochs_only():
    order = DataOrder(6, seed=2)
    first = order.take(4)
    order.retire(first[:3])
    assert order.take(2) == DataOrder(6, seed=2).take(6)[4:]  # the current epoch is untouched
    state = order.state_dict()
    second = order.take(3)
    assert sorted(second) == sorted(set(range(6)) - set(first[:3]))
    again = DataOrder(6, seed=2)
    again.load_state_dict(state)
    assert again.take(3) == second


def test_solved_prompts_retire_after_their_epoch(grpo_kwargs):
    # Constant rewards: every group is uniform ("always solved"). 16 prompts, 2 per step: epoch 0 is
    # steps 0-7; each step retires its 2 prompts until only one step's worth (2) would be left.
    result = run_stage(GRPOConfig(**{**grpo_kwargs, "rewards": [FAKE + "ConstantReward"], "max_steps": 10,
                                    "retire_solved_prompts": True}))
    rows = pq.read_table(result.metrics_path).to_pylist()
    assert [r["retired_prompts"] for r in rows] == [2, 4, 6, 8, 10, 12, 14, 14, 14, 14]
    assert result.summary["retired_prompts"] == 14
