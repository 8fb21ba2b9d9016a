"""The TRL plug: config mapping, refusal of unsupported options, and a real 2-step run on the tiny model."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rewards.base import Reward, RewardResult
from trainer.backends.trl_adapter import TRLReward, build_dataset, metrics_rows, trl_args, unsupported_options
from trainer.config import GRPOConfig
from trainer.prompt_set import row_modes

pytest.importorskip("trl")


def _dataset(path, n=4):
    rows = {"row_id": [f"r{i}" for i in range(n)], "source": ["s"] * n, "domain": ["math"] * n,
            "mode": ["think", "no_think"] * (n // 2), "prompt": [f"What is {i} plus {i + 1}?" for i in range(n)],
            "answer": [str(2 * i + 1) for i in range(n)]}
    pq.write_table(pa.table(rows), path)
    return path


def _config(tmp_path, model_dir, **overrides):
    base = dict(policy=str(model_dir), dataset=str(_dataset(tmp_path / "rl.parquet")), rewards=["math"],
                output_dir=str(tmp_path / "out"), max_steps=2, num_generations=2, prompts_per_step=2,
                max_new_tokens=8, learning_rate=1e-3, temperature=1.0, seed=0, backend="trl")
    base.update(overrides)
    return GRPOConfig(**base)


class ParityReward(Reward):
    """1 for completions of even length; checks that every answer column matches its own prompt."""

    name, version = "parity", "1"

    def __init__(self) -> None:
        self.mismatches = 0
        self.seen_prompts: list[str] = []

    def _score_one(self, prompt, completion, row):
        self.seen_prompts.append(prompt)
        a, b = map(int, re.findall(r"\d+", prompt))
        self.mismatches += row["answer"] != str(a + b)
        return RewardResult(float(len(completion) % 2 == 0), "parity")


def test_trl_args_map_the_paper_defaults(tmp_path, tiny_model_dir):
    cfg = _config(tmp_path, tiny_model_dir, num_generations=4, prompts_per_step=3, warmup_steps=2)
    args = trl_args(cfg, str(tmp_path / "w"), use_cpu=True)
    assert args.per_device_train_batch_size == 12 and args.num_generations == 4
    assert args.beta == 0.0 and args.num_iterations == 1 and args.loss_type == "dapo"
    assert (args.adam_beta1, args.adam_beta2) == (0.9, 0.95)
    assert args.max_completion_length == 8 and args.max_steps == 2 and args.seed == 0
    assert args.mask_truncated_completions is True and args.report_to in ([], "none", ["none"])
    assert args.activation_checkpointing is False
    assert getattr(args.lr_scheduler_type, "value", None) == "constant_with_warmup" and args.warmup_steps == 2
    seq = trl_args(_config(tmp_path, tiny_model_dir, loss_aggregation="sequence", kl_coef=0.01), "w", True)
    assert seq.loss_type == "grpo" and seq.beta == 0.01


def test_unsupported_options_are_refused(tmp_path, tiny_model_dir):
    assert unsupported_options(_config(tmp_path, tiny_model_dir)) == []
    cfg = _config(tmp_path, tiny_model_dir, dynamic_filtering=True, length_schedule=[(0, 4), (1, 8)])
    assert unsupported_options(cfg) == ["dynamic_filtering", "length_schedule"]
    workers = _config(tmp_path, tiny_model_dir, rollout_workers="auto")
    assert unsupported_options(workers) == ["rollout_workers=auto (TRL generates in its own process)"]


def test_dataset_renders_prompts_per_mode(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds, skipped = build_dataset(_config(tmp_path, tiny_model_dir, max_steps=3), tok)
    assert skipped == 0 and len(ds) == 3 * 2  # max_steps x prompts_per_step, in step order
    by_prompt = {row["user_prompt"]: row for row in ds}
    assert by_prompt["What is 0 plus 1?"]["prompt"].endswith("What is 0 plus 1? /think<|im_end|>\n<|im_start|>assistant\n")
    assert "/no_think" in by_prompt["What is 1 plus 2?"]["prompt"] and by_prompt["What is 1 plus 2?"]["mode"] == "no_think"
    assert all(sorted(ds["mode"][k:k + 2]) == ["no_think", "think"] for k in range(0, 6, 2))  # half/half steps
    assert row_modes(["think", None], "alternate") == ["think", "no_think"]
    assert row_modes(["think", "bogus"], "row") == ["think", "think"]
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        build_dataset(_config(tmp_path, tiny_model_dir, max_prompt_tokens=8), tok)


def test_trl_reward_passes_raw_prompts_and_columns():
    reward = ParityReward()
    out = TRLReward(reward)(prompts=["<|im_start|>...", "<|im_start|>..."], completions=["ab", "abc"],
                            completion_ids=[[1], [2]], trainer_state=None, log_metric=print,
                            user_prompt=["What is 1 plus 2?", "What is 2 plus 3?"], answer=["3", "5"])
    assert out == [1.0, 0.0] and reward.mismatches == 0
    assert reward.seen_prompts == ["What is 1 plus 2?", "What is 2 plus 3?"]
    assert TRLReward(reward).__name__ == "parity"


@pytest.mark.slow
def test_train_with_trl_two_steps(tmp_path, tiny_model_dir):
    import torch
    from safetensors.torch import load_file

    from trainer.backends.trl_adapter import train_with_trl

    # The random model never stops within 8 tokens: keep truncated rollouts in the loss.
    cfg = _config(tmp_path, tiny_model_dir, overlong_filtering=False)
    reward = ParityReward()
    rows, summary = train_with_trl(cfg, cfg.output_dir, [reward])
    out = tmp_path / "out"
    for name in ("model.safetensors", "config.json", "tokenizer.json", "generation_config.json"):
        assert (out / name).exists(), name
    assert "<|im_start|>" in (out / "chat_template.jinja").read_text()
    assert not (out / "training_args.bin").exists()
    before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before), "weights did not move"
    assert [r["step"] for r in rows] == [0, 1] and summary["steps"] == 2
    assert {"reward_mean", "reward_std", "grad_norm", "lr", "reward/parity/mean"} <= set(rows[0])
    # TRL called the reward with raw user prompts, G=2 completions each, columns aligned.
    assert len(reward.seen_prompts) == 2 * 2 * 2 and reward.mismatches == 0
    from transformers import AutoTokenizer

    stream, _ = build_dataset(cfg, AutoTokenizer.from_pretrained(tiny_model_dir))
    assert reward.seen_prompts == [p for p in stream["user_prompt"] for _ in range(2)]  # our order, G each
    assert not any("<|im_start|>" in p for p in reward.seen_prompts)


def test_metrics_rows_skip_the_summary_entry():
    history = [{"reward": 0.5, "reward_std": 0.1, "rewards/math/mean": 0.5, "step": 1, "grad_norm": 1.0,
                "completions/mean_length": 10.0, "step_time": 2.0},
               {"train_runtime": 3.0, "step": 1}]
    assert metrics_rows(history, ["math"], rollouts_per_step=4) == [
        {"step": 0, "reward_mean": 0.5, "reward_std": 0.1, "grad_norm": 1.0, "completion_len_mean": 10.0,
         "time_step_s": 2.0, "reward/math/mean": 0.5, "tokens_per_s": 20.0}]


@pytest.mark.slow
def test_run_grpo_backend_trl_keeps_the_stage_contract(tmp_path, tiny_model_dir):
    import json

    from trainer.stage import run_stage

    cfg = _config(tmp_path, tiny_model_dir, max_steps=1, overlong_filtering=False)
    result = run_stage(cfg)
    out = tmp_path / "out"
    assert result.output_dir == out and (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    lineage = json.loads((out / "lineage.json").read_text())
    assert lineage["backend"] == "trl" and lineage["algorithm"] == "grpo"
    assert lineage["rewards"][0]["name"] == "math" and lineage["rewards"][0]["version"]
    assert lineage["dataset"]["data_version"] and lineage["summary"]["steps"] == 1
    metrics = pq.read_table(out / "metrics.parquet").to_pylist()
    assert [m["step"] for m in metrics] == [0] and "reward/math/mean" in metrics[0]
    assert any((out / "tb").iterdir()) and not (out / "checkpoints").exists()
    # Finished folders are never overwritten: the same config returns the existing result.
    assert run_stage(cfg).lineage_path == result.lineage_path


def test_dataset_is_the_torch_backends_prompt_stream(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    from trainer.grpo import GRPOTrainer

    cfg = _config(tmp_path, tiny_model_dir, max_steps=5)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ds, _ = build_dataset(cfg, tok)
    ours = GRPOTrainer(cfg.model_copy(update={"backend": "torch"}), tok)
    stream = [ours.rows[i]["prompt"] for _ in range(cfg.max_steps) for i in ours.order.take(cfg.prompts_per_step)]
    assert ds["user_prompt"] == stream
    assert trl_args(cfg, str(tmp_path / "w"), use_cpu=True).shuffle_dataset is False
