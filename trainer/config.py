"""Typed stage configs (pydantic; no torch import so the CLI and Dagster load them cheaply).

Every field has a docstring: `config_reference_markdown()` renders them into the README table.
Defaults follow PAPER.md's GRPO (on-policy, no KL, token-level loss, AdamW betas 0.9/0.95),
scaled down where the paper's numbers only make sense on a GPU cluster (batch sizes, lengths).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_SYSTEM = "You are a helpful and harmless assistant."


class ConfigError(ValueError):
    """A config file that does not validate; the message names every bad field."""


class DeepSpeedOptions(BaseModel):
    """Settings of the DeepSpeed backend (ZeRO through deepspeed.initialize)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    zero_stage: Literal[0, 1, 2, 3] = 2
    """ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters."""
    num_processes: int = Field(default=2, ge=1)
    """Ranks launched with torchrun on this node (CPU ranks talk over gloo)."""
    offload_optimizer: bool = False
    """Offload optimizer state to CPU memory (ZeRO-Offload; GPU runs only)."""
    master_port: int | None = None
    """torchrun rendezvous port; None picks a free one."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Extra keys merged verbatim into the generated DeepSpeed JSON config."""


class _StageConfig(BaseModel):
    """Fields shared by every stage kind."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    policy: str
    """Input checkpoint: a Hugging Face model folder (safetensors + tokenizer)."""
    dataset: str
    """Input parquet file (SFT: curation SFT_SCHEMA rows; GRPO: RL_SCHEMA prompt rows)."""
    output_dir: str
    """Output checkpoint folder; never overwritten once finished (same config returns it)."""
    max_steps: int | None = Field(default=None, ge=1)
    """Number of optimizer steps; None = derived from `epochs` (SFT) / required for GRPO."""
    save_steps: int = Field(default=0, ge=0)
    """Save a resumable checkpoint under output_dir/checkpoints/step_N every N steps (0 = only the final)."""
    seed: int = 0
    """Seed for data order, sampling and initialisation of every random state."""
    backend: Literal["torch", "deepspeed", "trl"] = "torch"
    """Training backend: built-in torch, DeepSpeed ZeRO (torchrun ranks), or TRL (GRPO only)."""
    dtype: Literal["auto", "fp32", "bf16"] = "auto"
    """Training precision: auto = bf16 autocast where the hardware has bf16 natively (GPUs, CPUs with AVX512-BF16/AMX), fp32 elsewhere."""
    learning_rate: float = Field(default=2e-5, gt=0)
    """Peak AdamW learning rate."""
    adam_betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas (PAPER.md: 0.9, 0.95)."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW decoupled weight decay."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Gradient clipping by global norm; None disables clipping (the norm is still logged)."""
    deepspeed: DeepSpeedOptions = Field(default_factory=DeepSpeedOptions)
    """DeepSpeed backend options (used only when backend = deepspeed)."""
    resume: bool = False
    """Continue from the last checkpoint under output_dir/checkpoints (also `--resume`)."""
    log_every: int = Field(default=1, ge=1)
    """Print a metrics line every N steps (every step is still recorded in metrics.parquet)."""
    tensorboard: bool = True
    """Also write TensorBoard event files under output_dir/tb."""
    torch_threads: int | None = Field(default=None, ge=1)
    """torch intra-op threads (None = torch's default); DeepSpeed ranks default to 1 each."""
    keep_checkpoints: int = Field(default=2, ge=1)
    """Resumable checkpoints kept during a run (older ones are deleted; all go once it finishes)."""
    deterministic: bool = True
    """torch.use_deterministic_algorithms: bit-identical resume on CPU; disable for GPU speed."""
    lineage: dict[str, Any] = Field(default_factory=dict)
    """Recorded verbatim in lineage.json (the Dagster layer passes asset name, version, inputs)."""

    def config_hash(self) -> str:
        """Stable hash of everything that changes the result (`resume` excluded)."""
        payload = self.model_dump(mode="json", exclude={"resume"})
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.blake2b(blob, digest_size=16).hexdigest()


class SFTConfig(_StageConfig):
    """Supervised fine-tuning on chat-formatted rows; loss on assistant tokens only."""

    backend: Literal["torch", "deepspeed"] = "torch"
    """Training backend: built-in torch or DeepSpeed ZeRO (torchrun ranks)."""
    epochs: float = Field(default=1.0, gt=0)
    """Passes over the dataset when max_steps is None (fractions allowed)."""
    batch_size: int = Field(default=8, ge=1)
    """Sequences (packed rows when packing) per micro-batch."""
    grad_accum: int = Field(default=1, ge=1)
    """Micro-batches accumulated per optimizer step."""
    learning_rate: float = Field(default=2e-5, gt=0)
    """Peak AdamW learning rate."""
    warmup_ratio: float = Field(default=0.03, ge=0, lt=1)
    """Fraction of steps with linear warm-up from 0 to the peak learning rate."""
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    """Decay after warm-up: cosine to `min_lr_ratio` x peak, or constant."""
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """Floor of the cosine schedule as a fraction of the peak learning rate."""
    max_length: int = Field(default=1024, ge=8)
    """Maximum tokens per sequence; longer rows are truncated (the tail is dropped)."""
    packing: bool = True
    """Pack several rows into one max_length sequence (attention kept within each row)."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW decoupled weight decay."""


class GRPOConfig(_StageConfig):
    """One GRPO stage (PAPER.md defaults: on-policy, no KL, token-level loss)."""

    rewards: list[str] = Field(min_length=1)
    """Reward names resolved with rewards.registry.get_reward (e.g. [math])."""
    reward_weights: list[float] | None = None
    """Weight per reward in the summed reward; None = all 1.0."""
    reward_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Keyword options per reward name, passed to get_reward (e.g. {code: {timeout_s: 5}})."""
    reward_timeout_s: float | None = Field(default=600.0, gt=0)
    """Wall-clock limit of one reward call (a step's rollouts); past it they score 0 as failures and the stage goes on."""
    max_steps: int = Field(default=10, ge=1)
    """Number of GRPO steps (one optimizer update per step unless ppo_epochs > 1)."""
    num_generations: int = Field(default=8, ge=2)
    """G: rollouts sampled per prompt (PAPER.md: 8; 16 for SWE)."""
    prompts_per_step: int = Field(default=4, ge=1)
    """Prompts per step (PAPER.md: 128-256 on a cluster; small here for CPU)."""
    max_new_tokens: int = Field(default=256, ge=1)
    """Response budget in tokens; a rollout hitting it is 'truncated'."""
    learning_rate: float = Field(default=2e-6, gt=0)
    """AdamW learning rate (PAPER.md: 2e-6; 4e-6 for code; 2.5e-6 for SWE)."""
    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature of rollouts."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling threshold of rollouts (1.0 = off)."""
    warmup_steps: int = Field(default=0, ge=0)
    """Linear learning-rate warm-up steps (constant afterwards)."""
    kl_coef: float = Field(default=0.0, ge=0)
    """KL penalty to a frozen copy of the input policy (k3 estimator); 0 = no reference model."""
    clip_eps: float | None = Field(default=None, gt=0)
    """PPO-style ratio clipping epsilon; only meaningful with ppo_epochs > 1 (None = off)."""
    ppo_epochs: int = Field(default=1, ge=1)
    """Gradient updates per rollout batch; 1 = strictly on-policy (ratio 1)."""
    loss_aggregation: Literal["token", "sequence"] = "token"
    """token: sum over all tokens / their count (PAPER.md); sequence: mean per rollout, then mean."""
    advantage_transform: Literal["none", "tanh"] = "none"
    """Collapse remedy from PAPER.md: tanh of the group z-score (off by default)."""
    dynamic_filtering: bool = False
    """Drop groups whose rewards are all equal (no learning signal), as in IF-RL."""
    refill: bool = False
    """With dynamic_filtering, sample more prompts until prompts_per_step groups have signal."""
    max_refill_rounds: int = Field(default=2, ge=0)
    """Upper bound on extra sampling rounds per step when refilling."""
    retire_solved_prompts: bool = False
    """Math RL (PAPER.md): prompts whose G rollouts all scored the same (always or never solved) leave later epochs."""
    overlong_filtering: bool = True
    """Exclude rollouts truncated at the length budget from the loss (not rewarded 0)."""
    length_schedule: list[tuple[int, int]] = Field(default_factory=list)
    """[[step, max_new_tokens], ...]: from `step` on, use that budget (response-length curriculum)."""
    temperature_schedule: list[tuple[int, float]] = Field(default_factory=list)
    """[[step, temperature], ...]: from `step` on, sample at that temperature (e.g. 1.0 -> 0.8)."""
    mode: Literal["row", "think", "no_think", "alternate"] = "row"
    """Reasoning mode per prompt: from the row's `mode` column, forced, or alternating."""
    balance_modes: bool = True
    """When prompts mix /think and /no_think, order them so every step is half of each (PAPER.md: RLHF batches)."""
    system_prompt: str = DEFAULT_SYSTEM
    """System turn of every rollout prompt."""
    max_prompt_tokens: int = Field(default=1024, ge=8)
    """Prompts longer than this (rendered) are skipped, and counted in the summary."""
    rollout_engine: Literal["hf", "vllm"] = "hf"
    """Rollout sampler: built-in prefix-shared KV-cache sampler on the HF model (CPU/GPU) or colocated vLLM (GPU, [gpu] extra)."""
    rollout_batch_size: int = Field(default=64, ge=1)
    """Max rollouts (prompt x generation rows) per sampling batch (hf engine); bounds memory of the KV cache."""
    micro_batch_tokens: int = Field(default=8192, ge=64)
    """Tokens per training micro-batch (forward+backward); gradients accumulate across them."""
    vllm: dict[str, Any] = Field(default_factory=dict)
    """vLLM engine options (gpu_memory_utilization, tensor_parallel_size, ...)."""

    @model_validator(mode="after")
    def _check(self) -> "GRPOConfig":
        if self.reward_weights is not None and len(self.reward_weights) != len(self.rewards):
            raise ValueError(f"reward_weights has {len(self.reward_weights)} entries for {len(self.rewards)} rewards")
        unknown = set(self.reward_options) - set(self.rewards)
        if unknown:
            raise ValueError(f"reward_options for rewards not in `rewards`: {sorted(unknown)}")
        return self

    @field_validator("length_schedule", "temperature_schedule")
    @classmethod
    def _sorted(cls, value: list) -> list:
        steps = [s for s, _ in value]
        if steps != sorted(steps) or any(s < 0 for s in steps):
            raise ValueError("schedule steps must be non-negative and increasing")
        return value

    def budget_at(self, step: int) -> tuple[int, float]:
        """(max_new_tokens, temperature) in force at 0-based `step`, after the schedules."""
        tokens, temp = self.max_new_tokens, self.temperature
        for start, value in self.length_schedule:
            if step >= start:
                tokens = int(value)
        for start, value in self.temperature_schedule:
            if step >= start:
                temp = float(value)
        return tokens, temp


CONFIG_KINDS: dict[str, type[_StageConfig]] = {"sft": SFTConfig, "grpo": GRPOConfig}


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid {source}:"]
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(root)"
        lines.append(f"  {where}: {e['msg']}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any], kind: str, source: str = "config") -> _StageConfig:
    """Validate a dict as an `sft` or `grpo` config; errors name the offending fields."""
    if kind not in CONFIG_KINDS:
        raise ConfigError(f"unknown config kind {kind!r}; expected one of {sorted(CONFIG_KINDS)}")
    try:
        return CONFIG_KINDS[kind].model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source)) from None


def load_config(path: str | Path, kind: str) -> _StageConfig:
    """Load a YAML stage config (`kind` = sft | grpo)."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid {path}: top level must be a mapping, got {type(data).__name__}")
    return parse_config(data, kind, source=str(path))


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "")
    return text.replace("|", "\\|")


def config_reference_markdown() -> str:
    """Markdown tables (field, type, default, meaning) for SFTConfig and GRPOConfig."""
    out = []
    for kind, cls in CONFIG_KINDS.items():
        out += [f"### `{kind}` ({cls.__name__})", "", cls.__doc__ or "", "",
                "| field | type | default | meaning |", "|---|---|---|---|"]
        for name, info in cls.model_fields.items():
            default = "**required**" if info.is_required() else (
                "{}" if name == "deepspeed" else json.dumps(
                    info.default_factory() if info.default_factory else info.default))
            desc = (info.description or "").replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{name}` | `{_type_name(info.annotation)}` | `{default}` | {desc} |")
        out.append("")
    ds = DeepSpeedOptions
    out += ["### `deepspeed` options", "", "| field | type | default | meaning |", "|---|---|---|---|"]
    for name, info in ds.model_fields.items():
        default = json.dumps(info.default_factory() if info.default_factory else info.default)
        out.append(f"| `{name}` | `{_type_name(info.annotation)}` | `{default}` | {info.description} |")
    return "\n".join(out) + "\n"
