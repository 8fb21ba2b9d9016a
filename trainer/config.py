"""Run configs of the trainers (pydantic; no torch import so the CLI and Dagster load them cheaply).

A run config = the typed hyperparameters of `spec.train` (the same models a recipe's `train:`
block is validated against, so each field is declared once) + what a run needs besides:
policy, dataset, output folder, seed, resume, the lineage handed down by the platform, and for
GRPO the rewards as one list of typed specs (`spec.train.RewardSpec`: name, weight, options).
Each run config names the trainer (trainer.base.Trainer) that runs it by default, `trainer_class`;
a stage kind may name another (spec.kinds.StageKind.trainer). `RUN_CONFIGS` maps each built-in
algorithm to its run config for `cascade-train`. `config_reference_markdown()` renders every
field's docstring into the docs' tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spec.docs import fields_table
from spec.hashing import stable_hash
from spec.train import DeepSpeedOptions, GRPOSettings, RewardSpec, SFTSettings

__all__ = ["ConfigError", "GRPOConfig", "RunFields", "SFTConfig", "load_config", "parse_config"]


class ConfigError(ValueError):
    """A config file that does not validate; the message names every bad field."""


UNHASHED = {"resume", "reward_cache"}
"""Run fields that never change a stage's result, so they are left out of its config hash."""


class RunFields(BaseModel):
    """Fields of a stage run that are not hyperparameters (the platform fills them from the recipe)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    trainer_class: ClassVar[str] = ""
    """`module:Class` of the trainer that runs this config unless a stage kind names another."""

    policy: str
    """Input checkpoint: a Hugging Face model folder (safetensors + tokenizer)."""
    dataset: str
    """Input parquet file (SFT: curation SFT_SCHEMA rows; GRPO: RL_SCHEMA prompt rows)."""
    output_dir: str
    """Output checkpoint folder; never overwritten once finished (same config returns it)."""
    seed: int = 0
    """Seed for data order, sampling and initialisation of every random state."""
    resume: bool = False
    """Continue from the last checkpoint under output_dir/checkpoints (also `--resume`)."""
    lineage: dict[str, Any] = Field(default_factory=dict)
    """The platform's lineage keys for this output (asset, data_version, code_version, inputs)."""

    def config_hash(self) -> str:
        """Stable hash of everything that changes the result (`resume` and `reward_cache` excluded)."""
        return stable_hash(self.model_dump(mode="json", exclude=UNHASHED), 32)


class SFTConfig(SFTSettings, RunFields):
    """Supervised fine-tuning on chat-formatted rows; loss on assistant tokens only."""

    trainer_class: ClassVar[str] = "trainer.sft:SFTTrainer"


class GRPOConfig(GRPOSettings, RunFields):
    """One GRPO stage (the paper's defaults: on-policy, no KL, token-level loss)."""

    trainer_class: ClassVar[str] = "trainer.grpo:GRPOTrainer"

    rewards: list[RewardSpec] = Field(min_length=1)
    """Rewards of the weighted sum: `{name, weight, options}` each (a plain name is `{name: ...}`)."""
    reward_model: str | None = None
    """Reward-model checkpoint folder the rewards that need one (`rm`, `ifeval_rm`) score with, unless their options name a `model_path`; the checkpoint asset sets it from the recipe's `reward_model`."""
    reward_cache: str | None = None
    """Reward cache (sqlite) every rollout's score goes through, keyed by reward name + version, prompt, completion and row columns: None = `$CASCADE_HOME/reward_cache.sqlite` (shared with the evals), `"off"` or `""` = no cache. Not in the config hash: a cached score is the score."""


RUN_CONFIGS: dict[str, type[RunFields]] = {"sft": SFTConfig, "grpo": GRPOConfig}
"""The run config of each built-in algorithm that `cascade-train ALGORITHM CONFIG.yaml` runs."""


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid {source}:"]
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(root)"
        lines.append(f"  {where}: {e['msg']}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any], algorithm: str, source: str = "config") -> RunFields:
    """Validate a dict as an `sft` or `grpo` run config; errors name the offending fields."""
    if algorithm not in RUN_CONFIGS:
        raise ConfigError(f"unknown algorithm {algorithm!r}; expected one of {sorted(RUN_CONFIGS)}")
    try:
        return RUN_CONFIGS[algorithm].model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source)) from None


def load_config(path: str | Path, algorithm: str) -> RunFields:
    """Load a YAML run config (`algorithm` = sft | grpo)."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid {path}: top level must be a mapping, got {type(data).__name__}")
    return parse_config(data, algorithm, source=str(path))


def config_reference_markdown() -> str:
    """Markdown tables (field, type, default, meaning) for SFTConfig, GRPOConfig and DeepSpeed options."""
    out = []
    for algorithm, cls in RUN_CONFIGS.items():
        out += [f"### `{algorithm}` ({cls.__name__})", "", cls.__doc__ or "", "", fields_table(cls), ""]
    out += ["### `deepspeed` options", "", fields_table(DeepSpeedOptions)]
    return "\n".join(out) + "\n"
