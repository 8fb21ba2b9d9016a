"""The TRL plug: run one GRPO stage through TRL's `GRPOTrainer` behind our stage contract.

What: same inputs as the torch backend (a GRPOConfig: policy folder, RL prompt parquet, reward
names), same outputs (an HF folder with model.safetensors + tokenizer + chat template, lineage.json
from trainer.lineage, metrics.parquet + TensorBoard from trainer.metrics). Only the optimisation
loop is TRL's. It proves the trainer is pluggable and is the reference the benchmarks compare to.

How our config maps onto TRL 1.16 (the paper's GRPO, docs/cascade_rl.md#grpo-as-used):
  per-device batch = prompts_per_step x G, one generation batch per optimizer step and
  num_iterations = ppo_epochs (1 = strictly on-policy, ratio 1); beta = kl_coef (0: no reference
  model); loss_type "dapo" = sum over every completion token of the batch / their count, which with
  one process and no accumulation is exactly our token-level normalisation ("grpo", a mean per
  sequence then over sequences, for loss_aggregation=sequence); scale_rewards "group" = (r - mean)
  / (std + 1e-4) per prompt group, TRL's std being the sample std (our `advantage_std: sample`; the
  default `population` gives advantages √(G/(G−1)) times larger); temperature = the rollouts'
  sampling temperature, which TRL also divides its loss forward's logits by (`add_fused_lm_head(
  model, temperature=)`), as trainer.batching.target_logprobs does for the built-in backends;
  mask_truncated_completions = overlong filtering; AdamW betas, weight decay, grad clipping,
  constant LR after linear warm-up, as the torch backend does.
Prompts are rendered by curation.chat (system prompt + mode suffix) and handed to TRL as plain
text, so TRL tokenizes exactly the string our trainer would; rewards get the raw user prompt and
the prompt-set columns they read (their registry entries declare them: rewards.registry.
reward_columns; a plug-in gets every RL_SCHEMA column), scored by trainer.scoring as in the torch
backend.

Options TRL has no equivalent for (dynamic filtering, retiring solved prompts, length / temperature
schedules, tanh advantages, vLLM rollouts through our engine) are refused with a clear error rather than ignored.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

from rewards.base import completion_text

if TYPE_CHECKING:
    from trainer.config import GRPOConfig
    from trainer.stage import StageResult

USER_PROMPT = "user_prompt"
# TRL log key -> our metrics.parquet column (the torch backend's names, trainer/grpo.py).
METRIC_NAMES = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "zero_var_frac",
    "completions/mean_length": "completion_len_mean",
    "completions/max_length": "completion_len_max",
    "completions/clipped_ratio": "truncated_frac",
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "learning_rate": "lr",
    "loss": "loss",
    "step_time": "time_step_s",
}


def unsupported_options(config: "GRPOConfig") -> list[str]:
    """Non-default GRPOConfig options the TRL backend cannot honour (empty = runnable)."""
    problems = []
    if config.dynamic_filtering:
        problems.append("dynamic_filtering")
    if config.retire_solved_prompts:
        problems.append("retire_solved_prompts")
    if config.length_schedule:
        problems.append("length_schedule")
    if config.temperature_schedule:
        problems.append("temperature_schedule")
    if config.advantage_transform != "none":
        problems.append(f"advantage_transform={config.advantage_transform}")
    if config.rollout_engine == "vllm":  # auto means TRL's own generate here
        problems.append(f"rollout_engine={config.rollout_engine} (TRL brings its own vLLM integration)")
    if config.rollout_workers != 1:
        problems.append(f"rollout_workers={config.rollout_workers} (TRL generates in its own process)")
    return problems


def dataset_columns(config: "GRPOConfig", available: Sequence[str]) -> list[str]:
    """The prompt-set columns of `available` TRL's dataset carries: `mode` (the mode each prompt was
    rendered in) and those the stage's rewards read (every one when a plug-in reward declares none)."""
    from curation.schemas import RL_SCHEMA
    from rewards.registry import reward_columns

    declared = [reward_columns(r.name) for r in config.rewards]
    wanted = set(RL_SCHEMA.names) if None in declared else {"mode", *(c for cols in declared for c in cols or ())}
    return [c for c in available if c in wanted and c != "prompt"]


def build_dataset(config: "GRPOConfig", tokenizer: Any) -> tuple[Any, int]:
    """TRL dataset of rendered prompts + reward columns; returns (dataset, prompts skipped as too long).

    Its rows are the torch backend's prompt stream, step after step (trainer.prompt_set.PromptSet and
    its order, mode-balanced as `balance_modes` asks), and TRL reads them in order
    (shuffle_dataset off), so both backends train on the same prompts at the same steps.
    """
    import pyarrow.parquet as pq
    from datasets import Dataset

    from trainer.prompt_set import load_prompt_set

    prompts = load_prompt_set(config, tokenizer)
    columns = dataset_columns(config, pq.read_schema(config.dataset).names)
    data: dict[str, list] = {"prompt": [], USER_PROMPT: [], **{c: [] for c in columns}}
    for i in prompts.order(config).take(config.max_steps * config.prompts_per_step):
        row, mode = prompts.rows[i], prompts.modes[i]
        data["prompt"].append(prompts.texts[i])
        data[USER_PROMPT].append(row["prompt"])
        for c in columns:
            data[c].append(mode if c == "mode" else row[c])
    return Dataset.from_dict(data), prompts.skipped_long


class TRLReward:
    """A rewards.base.Reward seen through TRL's call: raw user prompts in, TRL's extra kwargs out.

    Scored through trainer.scoring.score_reward, with the columns the reward reads, so a reward
    that raises or outlives `timeout_s` gives zeros under TRL too instead of stopping or hanging the
    stage. TRL's own kwargs (completion_ids, trainer_state, ...) are not RL_SCHEMA columns: dropped.
    """

    def __init__(self, reward: Any, timeout_s: float | None = None):
        self.reward, self.timeout_s = reward, timeout_s
        self.__name__ = getattr(reward, "name", type(reward).__name__)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        from curation.schemas import RL_SCHEMA
        from trainer.scoring import score_reward

        user_prompts = kwargs.pop(USER_PROMPT, prompts)
        columns = {k: v for k, v in kwargs.items() if k in RL_SCHEMA.names}
        texts = [completion_text(c) for c in completions]
        return score_reward(self.reward, list(user_prompts), texts, columns, self.timeout_s)[0]


def trl_args(config: "GRPOConfig", work_dir: str, use_cpu: bool) -> Any:
    """Our GRPOConfig as TRL 1.16's GRPOConfig (see the module docstring for the mapping)."""
    from trl import GRPOConfig as TRLGRPOConfig

    from trainer.backend_api import native_bf16
    from trainer.tracking import trl_report_to

    bf16 = config.dtype == "bf16" or (config.dtype == "auto" and native_bf16("cpu" if use_cpu else "cuda"))
    return TRLGRPOConfig(
        output_dir=work_dir,
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=0,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=config.warmup_steps,
        adam_beta1=config.adam_betas[0],
        adam_beta2=config.adam_betas[1],
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm if config.max_grad_norm is not None else 0.0,
        beta=config.kl_coef,
        num_iterations=config.ppo_epochs,
        epsilon=config.clip_eps if config.clip_eps is not None else 0.2,
        loss_type="dapo" if config.loss_aggregation == "token" else "grpo",
        scale_rewards="group",
        mask_truncated_completions=config.overlong_filtering,
        reward_weights=[r.weight for r in config.rewards],
        max_steps=config.max_steps,
        seed=config.seed,
        data_seed=config.seed,
        shuffle_dataset=False,  # the dataset already is the step-by-step prompt stream (build_dataset)
        save_strategy="steps" if config.save_steps else "no",
        save_steps=config.save_steps or 500,
        logging_steps=1,
        report_to=trl_report_to(config.tracking),
        use_cpu=use_cpu,
        bf16=bf16,
        activation_checkpointing=False,  # TRL defaults it on; it only trades speed for memory
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        log_completions=False,
    )


def metrics_rows(log_history: Sequence[dict[str, Any]], reward_names: Sequence[str],
                 rollouts_per_step: int) -> list[dict[str, Any]]:
    """One row per optimizer step from TRL's log history, in the torch backend's names (0-based steps)."""
    rows = []
    for entry in log_history:
        if "step" not in entry or "train_runtime" in entry:
            continue  # the end-of-training summary is not a step
        row: dict[str, Any] = {"step": int(entry["step"]) - 1}
        for src, dst in METRIC_NAMES.items():
            if src in entry:
                row[dst] = float(entry[src])
        for name in reward_names:
            for stat in ("mean", "std"):
                key = f"rewards/{name}/{stat}"
                if key in entry:
                    row[f"reward/{name}/{stat}"] = float(entry[key])
        if "completion_len_mean" in row and row.get("time_step_s"):
            row["tokens_per_s"] = row["completion_len_mean"] * rollouts_per_step / row["time_step_s"]
        rows.append(row)
    return rows


def train_with_trl(config: "GRPOConfig", output_dir: str, rewards: Sequence[Any]) -> tuple[list[dict], dict]:
    """Train with TRL and save the final HF folder into `output_dir`; returns (metric rows, summary)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    problems = unsupported_options(config)
    if problems:
        raise ValueError(f"backend=trl does not support: {', '.join(problems)}; use backend=torch")
    use_cpu = not torch.cuda.is_available()
    tokenizer = AutoTokenizer.from_pretrained(config.policy)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset, skipped = build_dataset(config, tokenizer)
    model = AutoModelForCausalLM.from_pretrained(config.policy, dtype=torch.float32)
    work_dir = os.path.join(output_dir, "checkpoints")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[TRLReward(r, config.reward_timeout_s) for r in rewards],
        args=trl_args(config, work_dir, use_cpu),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    resume = config.resume and _has_checkpoint(work_dir)
    trainer.train(resume_from_checkpoint=True if resume else None)
    trainer.save_model(output_dir)
    tokenizer.save_pretrained(output_dir)
    args_file = os.path.join(output_dir, "training_args.bin")
    if os.path.exists(args_file):
        os.remove(args_file)  # pickled TRL args: not part of the HF checkpoint contract
    rows = metrics_rows(trainer.state.log_history, [getattr(r, "name", str(r)) for r in rewards],
                        config.prompts_per_step * config.num_generations)
    summary = {"steps": int(trainer.state.global_step), "prompts": len(set(dataset[USER_PROMPT])),
               "skipped_long_prompts": skipped}
    return rows, summary


def run_grpo_trl(config: "GRPOConfig") -> Any:
    """The GRPO stage through TRL -> trainer.stage.StageResult (same folder layout as the torch backend).

    trainer.stage.run_grpo dispatches here for backend=trl, after its never-overwrite check.
    """
    import shutil
    from pathlib import Path

    from spec.lineage import write_record
    from trainer.lineage import build_lineage
    from trainer.metrics import MetricsWriter
    from trainer.scoring import load_rewards, scorers
    from trainer.stage import result_for

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rewards, _, records = load_rewards(config.rewards, config.reward_model)
    # The same reward cache as the built-in backends (no per-rollout audit table: TRL owns the loop).
    rows, summary = train_with_trl(config, str(out), scorers(rewards, config.reward_cache))
    metrics = MetricsWriter(out, config.tensorboard)  # mlflow / wandb: TRL reports to them itself (report_to)
    for row in rows:
        metrics.log(row.pop("step"), row)
    metrics.close()
    if metrics.rows:
        summary["final_metrics"] = {k: v for k, v in metrics.rows[-1].items() if isinstance(v, float)}
    write_record(out, build_lineage(config, "grpo", rewards=records, summary=summary))
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the finished stage supersedes them
    return result_for(out)


def _has_checkpoint(work_dir: str) -> bool:
    return os.path.isdir(work_dir) and any(d.startswith("checkpoint-") for d in os.listdir(work_dir))


def run(config: Any, trainer: str) -> "StageResult":
    """Backend "trl" in trainer.stage.BACKENDS: GRPO stages only, through `run_grpo_trl`."""
    from spec.entry_points import import_target

    if import_target(trainer).algorithm != "grpo":
        raise ValueError(f"backend 'trl' runs GRPO stages only, not {trainer}")
    return run_grpo_trl(config)
