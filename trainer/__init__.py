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

Modules:
  config.py            run configs (SFTConfig, GRPOConfig; pydantic, no torch) + YAML loading + docs tables
  stage.py             `run_stage` (config -> StageResult, never overwrite), `BACKENDS`, `execute()`: the loop every backend runs
  base.py              the `Trainer` protocol (attach, train_step, state_dict, summary) and its base class
  backend_api.py       the `Backend` base class: LR schedule, dtype, optimizer, the NaN/inf guard
  backends/            torch (one process), DeepSpeed ZeRO (torchrun ranks), the TRL plug
  sft.py               SFT: assistant-only loss, packing, cosine schedule, grad accumulation
  grpo.py              GRPO step: rollouts -> rewards -> group advantages -> token-level loss
  multi_domain.py      Cascade 2 multi-domain RL: one GRPO stage over a mix of domains
  mopd.py              Cascade 2 multi-domain on-policy distillation from per-domain teachers
  prompt_set.py        RL prompts as every GRPO backend sees them: modes, rendering, the prompt stream
  scoring.py           scoring rollouts with a stage's rewards through the reward cache, never crashing
  rollout.py           the rollout-engine protocol; `hf`: prefix-shared KV-cache sampling
  rollout_vllm.py      vLLM rollouts colocated with the trainer, fed the new weights after every update
  rollout_audit.py     `rollouts.parquet` of an RL checkpoint, its summary, `cascade audit`
  batching.py          packed / prefix-shared batch layouts; log-probs with the LM head on targets only
  attention.py         varlen attention for packed batches: segment boundaries, no L x L mask
  checkpointing.py     resumable checkpoints: optimizer, scheduler, RNG and data-order state
  metrics.py           per-step metrics -> metrics.parquet, plus the trackers
  tracking.py          experiment trackers: TensorBoard, MLflow, Weights & Biases
  lineage.py           a trained checkpoint's lineage record, through spec.lineage's one writer
  model_card.py        a Hugging Face README.md in every checkpoint folder
  models.py            the built-in models (tiny random Qwen2, SmolLM2 from GGUF) and the one model resolver
  evaluate.py          held-out evaluation of one checkpoint per domain, /think and /no_think
  tts.py               test-time scaling in the evals: generate k, select one, submit it
  stats.py             intervals for one eval cell, paired tests for two checkpoints
  gates.py             the verdicts: no_forgetting, learned, training_signal
  cascade_report.py    the cascade report: did each stage learn its domain and keep the earlier ones?
  cli.py               `cascade train sft|grpo --config PATH [--resume]` and `cascade audit`

No dagster import anywhere here; torch/transformers are imported lazily on CLI paths.
"""
