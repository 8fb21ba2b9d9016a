"""Our GRPO loss and gradient against TRL's GRPOTrainer on one fixed batch at T = 0.7.

Same prompt and completion token ids, same advantages, two copies of the same weights: our
trainer's micro-batch loss (trainer.grpo.GRPOTrainer._loss, log-probs at the sampling
temperature) and TRL 1.16's `_compute_loss` (its fused LM head divides the logits by
`args.temperature`) must agree within 1e-5, for the token-level loss (TRL `dapo`) and the
sequence-level one (TRL `grpo`), with TRL's args built by our adapter (trl_args). A zero-advantage
completion is in TRL's batch but not in our forward (the trainer skips it): both count its
tokens (or itself) in the normaliser. The advantages follow `advantage_std: sample`, TRL's
`scale_rewards: group` formula up to its +1e-4."""

from __future__ import annotations

import pytest
import torch

from trainer.config import GRPOConfig
from trainer.grpo import GRPOTrainer, group_advantages

trl = pytest.importorskip("trl")

T = 0.7
PROMPTS = [[5, 6, 7, 8], [9, 10, 11, 12]]  # one length: no left padding, so positions agree
COMPLETIONS = [[[20, 21, 22], [23, 24], [25, 26, 27, 28, 29]], [[30], [31, 32, 33], [34, 35]]]
REWARDS = [[1.0, 0.0, 0.5], [0.2, 0.2, 0.8]]


def _advantages() -> list[list[float]]:
    from trl.trainer.utils import nanstd

    out = []
    for r in REWARDS:
        adv, _ = group_advantages(r, std_kind="sample")
        x = torch.tensor(r, dtype=torch.float64)
        trl_adv = (x - x.mean()) / (nanstd(x) + 1e-4)  # TRL's scale_rewards="group"
        torch.testing.assert_close(torch.tensor(adv, dtype=torch.float64), trl_adv, rtol=1e-3, atol=1e-4)
        out.append(adv)
    out[1][0] = 0.0  # a rollout that carries no loss: TRL weighs it 0, our trainer skips its forward
    return out


def _trl_loss(cfg: GRPOConfig, advantages: list[list[float]], tmp_path) -> tuple[float, list[torch.Tensor]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer as TRLGRPOTrainer

    from trainer.backends.trl_adapter import trl_args

    args = trl_args(cfg, str(tmp_path / "trl"), use_cpu=True)
    assert args.temperature == T  # the adapter forwards the sampling temperature to TRL
    tok = AutoTokenizer.from_pretrained(cfg.policy)
    model = AutoModelForCausalLM.from_pretrained(cfg.policy, dtype=torch.float32)
    trainer = TRLGRPOTrainer(model=model, reward_funcs=[lambda prompts, completions, **kw: [0.0] * len(prompts)],
                             args=args, train_dataset=Dataset.from_dict({"prompt": ["x"] * 8}), processing_class=tok)
    rows = [(p, c, a) for p, cs, advs in zip(PROMPTS, COMPLETIONS, advantages) for c, a in zip(cs, advs)]
    width = max(len(c) for _, c, _ in rows)
    completion_ids = torch.tensor([c + [tok.pad_token_id] * (width - len(c)) for _, c, _ in rows])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for _, c, _ in rows])
    inputs = {"prompt_ids": torch.tensor([p for p, _, _ in rows]), "prompt_mask": torch.ones(len(rows), 4, dtype=torch.long),
              "completion_ids": completion_ids, "completion_mask": completion_mask,
              "advantages": torch.tensor([a for _, _, a in rows]), "old_per_token_logps": None,
              "num_items_in_batch": completion_mask.sum()}
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by Trainer's train loop
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in trainer.model.parameters()]


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_grpo_loss_and_gradient_equal_trl(grpo_kwargs, tmp_path, aggregation):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.torch_backend import TorchBackend

    cfg = GRPOConfig(**{**grpo_kwargs, "temperature": T, "loss_aggregation": aggregation, "advantage_std": "sample",
                        "num_generations": 3})
    advantages = _advantages()
    expected, expected_grads = _trl_loss(cfg, advantages, tmp_path)

    model = AutoModelForCausalLM.from_pretrained(cfg.policy, dtype=torch.float32)
    trainer = GRPOTrainer(cfg, AutoTokenizer.from_pretrained(cfg.policy))
    trainer.attach(TorchBackend(model, cfg, 1, 0))
    rows = [(p, [c for c, a in zip(cs, advs) if a != 0.0], [a for a in advs if a != 0.0])
            for p, cs, advs in zip(PROMPTS, COMPLETIONS, advantages)]
    all_completions = [c for cs in COMPLETIONS for c in cs]
    n_tok, n_seq = float(sum(map(len, all_completions))), float(len(all_completions))
    loss, _ = trainer._loss(rows, 0, 0, {}, n_tok, n_seq, temperature=T)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-5)
    for ours, theirs in zip(model.parameters(), expected_grads):
        torch.testing.assert_close(ours.grad, theirs, atol=1e-5, rtol=1e-4)
    # The gradient is the tempered one: at T = 1 it differs (so the comparison can fail).
    model.zero_grad()
    untempered, _ = trainer._loss(rows, 0, 0, {}, n_tok, n_seq, temperature=1.0)
    untempered.backward()
    assert max(float((a.grad - b).abs().max()) for a, b in zip(model.parameters(), expected_grads)) > 1e-4
