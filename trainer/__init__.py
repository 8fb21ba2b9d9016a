"""Cascade trainer: one stage = (policy checkpoint, dataset, rewards, config) -> new checkpoint.

What our GRPO reduces to (the paper's default, nanochat-style, in plain words):
  for each step:
    take `prompts_per_step` prompts; render each as ChatML (default system + user prompt + " /think"
    or " /no_think"); sample G completions per prompt from the current policy;
    score every completion with the stage's reward functions (weighted sum; a failing reward gives 0);
    advantage of completion i = (r_i - mean(r of its group)) / std(r of its group), 0 if std == 0;
    loss = -(sum over every completion token of advantage * log pi_T(token)) / (number of tokens),
    pi_T = softmax(logits / sampling temperature), the distribution the completions came from;
    one AdamW step (betas 0.9, 0.95).  That is all: strictly on-policy (the importance ratio is 1,
    so no old-policy forward), no KL, no reference model, no entropy bonus, no clipping.
  Options (off by default): KL to a frozen reference, PPO-style clipping with several epochs per
  batch, sequence-level loss aggregation, dynamic filtering of zero-variance groups (with refill),
  overlong filtering (truncated completions are dropped from the loss; on by default as in the
  paper), step schedules for the response budget and the temperature, per-epoch retirement of
  always/never-solved prompts (Math RL). Prompt sets that mix /think and /no_think give every
  step half of each (RLHF).

Why it is fast on CPU: sampling runs with the KV cache in one batched `generate` call over all
prompts x G; the training pass is ONE forward+backward over the completions packed without padding
waste (sorted, micro-batched by tokens); log-probs of the sampled tokens come from that same
forward (ratio 1 means the sampling-time log-probs enter no loss; they are only compared with the
training ones, `rollout_logprob_diff_*` in the metrics).

Modules
  config.py        SFTConfig / GRPOConfig (pydantic, no torch import) + YAML loading + docs table.
  models.py        tiny random Qwen2 + locally trained ChatML tokenizer (tests); SmolLM2 from GGUF.
  rollout.py       RolloutEngine protocol; HFRolloutEngine (prefix-shared KV-cache sampling).
  rollout_vllm.py  VLLMRolloutEngine: vLLM rollouts colocated on the trainer's GPU.
  sft.py           SFT: assistant-only loss, packing, cosine schedule, grad accumulation.
  prompt_set.py    RL prompts as every GRPO backend sees them: modes, rendering, the prompt stream.
  grpo.py          GRPO step: rollouts -> rewards -> group advantages -> token-level loss.
  batching.py      packed / prefix-shared batch layouts; log-probs with the LM head on targets only.
  checkpointing.py periodic checkpoints with optimizer/scheduler/RNG/data-order state; resume.
  lineage.py       lineage.json: parent, dataset version, rewards + versions, config hash, libs.
  metrics.py       per-step metrics -> metrics.parquet + TensorBoard event files.
  stage.py         the contract: run_sft / run_grpo -> StageResult; never overwrite; imports no backend.
  backend_registry.py  backend name -> "module:run", imported lazily; register_backend().
  loop.py          execute(): the loop shared by every backend and rank (resume, steps, outputs).
  backends/        base.py (Backend base class, LR schedule, dtype, optimizer, NaN guard); torch
                   (single process), deepspeed (ZeRO 1/2/3, torchrun), trl (adapter, D2).
  evaluate.py      held-out evaluation of one checkpoint per domain, /think and /no_think.
  cli.py           `cascade train sft|grpo --config PATH [--resume]`.

No dagster import anywhere here; torch/transformers are imported lazily on CLI paths.
"""
