"""Reward names -> classes, imported only when asked for; the one option check; the columns each reads.

Recipes and the CLI name rewards by string (`math`, `code`, ...), by import path
(`package.module:attr`) or by file (`path/to/my_rewards.py:attr`, relative to the working
directory; see spec.entry_points): a Reward class, an instance, or any TRL-style callable
`fn(prompts, completions, **columns) -> list[float | None]`, which is wrapped in a
`rewards.function.FunctionReward` (failures become recorded scores with reasons). The
registry maps each built-in name to a "module:Class" path and imports it when asked, so
importing the registry costs nothing (no torch, sandbox or sentence-transformers import at CLI
start-up).

Columns: a built-in reward's `RewardEntry` is the one declaration of the row columns it reads
(`reward_columns`); the GRPO scorer and the TRL adapter hand it those and no others. A plug-in
declares none and gets every column of the row.

Options: every reward has an option model, its own `Options` class when it declares one, else
derived from its constructor's signature (names, types, defaults), or for a plain function
from its keyword-only parameters with defaults. `validate_options` is the one check: `CATALOG`
hands it to the recipe loader, so a misspelt option fails at load with its field path, and the
validated values stay on the recipe's `RewardSpec` (`validated_options()`), which is what
`build_reward` builds from: a reward loaded from a recipe is validated once. `build_reward` keeps
the reward it built on hand until the stage that scores with it takes it, so the version look-up
of the checkpoint asset and the trainer share one instance (built once per stage run).
`get_reward(name, **options)` validates and builds in one call (the CLI, evals, filters).

Versions come from code (spec.hashing.source_version), never by hand: `reward_version(s)`
give the full version of built rewards (source digest plus what their options change) for
lineage; `reward_code_versions` gives source digests (and an options hash) without importing
or building anything, for Dagster `code_version`s at definition time, so editing a reward's
code makes the stages that use it stale.
Adding a reward: a Reward subclass in its own module plus one line in `REWARDS`.
"""

from __future__ import annotations

import importlib
import inspect
import typing
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from spec.entry_points import EntryPointError, import_target, is_file_target, split_target
from spec.hashing import runs_file_code


@dataclass(frozen=True)
class RewardEntry:
    """A built-in reward: where its class lives and what it needs from the recipe."""

    target: str
    """"module:Class" of its Reward subclass."""
    columns: tuple[str, ...] = ()
    """Row columns it reads besides the completion and the prompt (a row without one scores 0 as an infra
    error); with `optional_columns` the one declaration of what it reads (`reward_columns`)."""
    optional_columns: tuple[str, ...] = ()
    """Row columns it reads when present."""
    needs_reward_model: bool = False
    """It scores with the recipe's reward-model checkpoint (the asset passes `model_path`)."""


REWARDS: dict[str, RewardEntry] = {
    "math": RewardEntry("rewards.math:MathReward", columns=("answer",)),
    "ifeval": RewardEntry("rewards.ifeval:IFEvalReward", columns=("instruction_id_list", "kwargs")),
    "ifeval_rm": RewardEntry("rewards.ifeval:IFEvalRMReward", columns=("instruction_id_list", "kwargs"),
                             needs_reward_model=True),
    "code": RewardEntry("rewards.code:CodeReward", columns=("tests",)),
    "swe": RewardEntry("rewards.swe:SweReward", columns=("golden_patch",), optional_columns=("code_context",)),
    "rm": RewardEntry("rewards.reward_model:RMReward", needs_reward_model=True),
    "mcqa": RewardEntry("rewards.multi_domain:MCQAReward", columns=("answer",), optional_columns=("domain",)),
    "structured_output": RewardEntry("rewards.multi_domain:StructuredOutputReward", columns=("json_schema",),
                                     optional_columns=("domain",)),
    "tool_call": RewardEntry("rewards.multi_domain:ToolCallReward", columns=("reference_call",),
                             optional_columns=("domain", "tools")),
}
"""Built-in reward name -> entry."""


class UnknownRewardError(ValueError):
    """A reward name that is not in REWARDS and not an importable `module:attr`."""


def _import(target: str) -> Any:
    """The object `target` names, as its file holds it now: a `module:attr` whose file was edited
    after the module was imported (a long-lived process) is reloaded, so the reward runs, and is
    versioned by, the code on disk (`file.py:attr` targets reload on their own)."""
    try:
        obj = import_target(target)
        if not is_file_target(target) and not runs_file_code(obj):
            importlib.reload(importlib.import_module(split_target(target)[0]))
            obj = import_target(target)
        return obj
    except EntryPointError as err:
        raise UnknownRewardError(f"reward: {err}") from None
    except Exception as err:  # noqa: BLE001 - user code that fails to reload does not import
        raise UnknownRewardError(f"reward: cannot reload {target!r}: {type(err).__name__}: {err}") from None


def reward_class(name: str) -> Any:
    """The Reward subclass registered as `name`, or the object a `module:attr` name points to.

    >>> reward_class("math").__name__
    'MathReward'
    """
    if name in REWARDS:
        return _import(REWARDS[name].target)
    if ":" in name:
        return _import(name)
    raise UnknownRewardError(f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))} "
                             "(or give an import path `module:attr` or a file `path/to/file.py:attr`)")


@lru_cache(maxsize=None)
def options_model(target: Any) -> type[BaseModel]:
    """The option model of a reward: its `Options`, else one derived from a class's `__init__`
    or a function's keyword-only parameters with defaults (an instance takes none)."""
    explicit = getattr(target, "Options", None)
    if isinstance(explicit, type) and issubclass(explicit, BaseModel):
        return explicit
    if inspect.isroutine(target):
        from rewards.function import function_options

        hints = _hints(target)
        kwonly = {n: (_checkable(hints.get(n, Any)), p.default) for n, p in function_options(target).items()}
        return create_model(f"{getattr(target, '__name__', 'reward')}Options",
                            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True), **kwonly)
    if not isinstance(target, type):  # an instance takes no options
        return create_model(f"{type(target).__name__}Options", __config__=ConfigDict(extra="forbid"))
    hints = _hints(target.__init__)
    fields: dict[str, Any] = {}
    extra = "forbid"
    for param in list(inspect.signature(target.__init__).parameters.values())[1:]:
        if param.kind is param.VAR_KEYWORD:
            extra = "allow"
        elif param.kind is not param.VAR_POSITIONAL:
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (_checkable(hints.get(param.name, Any)), default)
    return create_model(f"{target.__name__}Options",
                        __config__=ConfigDict(extra=extra, arbitrary_types_allowed=True), **fields)


def _hints(fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an unresolvable annotation is checked as Any
        return {}


def _checkable(annotation: Any) -> Any:
    """`annotation` where pydantic can check it; Any for types it cannot (protocols, callables of objects)."""
    try:
        TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True))
        return annotation
    except Exception:  # noqa: BLE001 - pydantic raises several schema error types
        return Any


def _validated(name: str, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    target = reward_class(name)
    try:
        model = options_model(target).model_validate(options)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(options)'}: {e['msg']}" for e in err.errors())
        raise ValueError(f"reward {name!r} options: {problems}") from None
    values = {k: getattr(model, k) for k in options if k in type(model).model_fields}
    values |= {k: v for k, v in options.items() if k not in type(model).model_fields}  # **options
    return target, values


def validate_options(name: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options of reward `name` as its option model validates them (typed values, the keys given);
    ValueError, naming each bad field, when `name` does not resolve or they do not fit."""
    return _validated(name, dict(options or {}))[1]


def _build(name: str, target: Any, values: dict[str, Any]) -> Any:
    """A Reward from `name`'s target and validated option values (no validation here)."""
    from rewards.base import Reward

    if isinstance(target, type):
        built = target(**values)
        if isinstance(built, Reward):
            if name in REWARDS:  # the columns its entry declares, applied by Reward.score
                built.reads = reward_columns(name)
            return built
        target, bind = built, False  # a callable object: its options are spent (they only version it)
    elif isinstance(target, Reward):
        return target
    else:
        bind = True
    if not callable(target):
        raise UnknownRewardError(f"reward {name!r}: {type(target).__name__} object is not callable")
    from rewards.function import FunctionReward

    return FunctionReward(target, name, values, bind=bind)


def get_reward(name: str, **options: Any) -> Any:
    """Validate `options` and build the reward `name`: a Reward (a class is built with the
    options; an instance is returned as is); any other callable comes wrapped in a
    FunctionReward named `name` (a function gets the options bound).

    >>> get_reward("swe", similarity="lexical").version.endswith("-lexical")
    True
    """
    return _build(name, *_validated(name, options))


_HELD: dict[int, tuple[Any, dict[str, Any], Any, Any]] = {}
"""id(spec) -> (weak reference to the spec, the options and target it was built from, the reward):
built by `build_reward`, not yet taken by the stage that scores with it."""


def build_reward(spec: Any, keep: bool = True, reward_model: str | None = None) -> Any:
    """The reward a RewardSpec names, built from the options the recipe loader validated (validated
    here only when no catalog did: a run config file, a DeepSpeed rank). `reward_model`: the
    reward-model checkpoint folder a reward that needs one scores with (its `model_path`, unless the
    recipe's options set one), a build argument, so the options stay as validated. Built once: the
    instance is kept until a call with `keep=False` (the stage that scores with it) takes it, and
    reused only while its options and code are current (an edit re-versions it; a changed function
    reloads)."""
    key, target = id(spec), reward_class(spec.name)
    folder = reward_model if needs_reward_model(spec.name) else None
    held = _HELD.pop(key, None)
    if (held is not None and held[0]() is spec and held[1] == (dict(spec.options), folder) and held[2] is target
            and held[3].runs_current_code()):
        reward = held[3]
    else:
        checked = spec.validated_options() if hasattr(spec, "validated_options") else None
        values = checked if checked is not None else _validated(spec.name, dict(spec.options))[1]
        if folder is not None and values.get("model_path") is None:
            values = {**values, "model_path": folder}
        reward = _build(spec.name, target, values)
    if keep:
        _HELD[key] = (weakref.ref(spec, lambda _: _HELD.pop(key, None)), (dict(spec.options), folder), target, reward)
    return reward


def reward_columns(name: str) -> tuple[str, ...] | None:
    """The row columns reward `name` reads (required, then optional); None for a plug-in, which
    declares none and gets every column.

    >>> reward_columns("swe"), reward_columns("my_pkg.rewards:brevity")
    (('golden_patch', 'code_context'), None)
    """
    entry = REWARDS.get(name)
    return entry.columns + entry.optional_columns if entry else None


def needs_reward_model(name: str) -> bool:
    """Whether reward `name` scores with the recipe's reward-model checkpoint."""
    return name in REWARDS and REWARDS[name].needs_reward_model


class _Catalog:
    """The recipe loader's view of the rewards (spec.recipe.RewardCatalog)."""

    check = staticmethod(validate_options)
    check_name = staticmethod(reward_class)
    needs_reward_model = staticmethod(needs_reward_model)


CATALOG = _Catalog()


@dataclass(frozen=True)
class _Named:
    """A reward named outside a recipe: `.name` and `.options`, like a RewardSpec."""

    name: str
    options: dict[str, Any]


def _specs(specs: Iterable[Any] | dict[str, dict[str, Any]]) -> list[Any]:
    """RewardSpec-like objects (`.name`, `.options`) from names, a {name: options} dict or RewardSpecs."""
    if isinstance(specs, dict):
        return [_Named(n, dict(o or {})) for n, o in specs.items()]
    return [_Named(s, {}) if isinstance(s, str) else s for s in specs]


def reward_versions(specs: Iterable[Any] | dict[str, dict[str, Any]], reward_model: str | None = None) -> dict[str, str]:
    """{name: version} for lineage records: names, a {name: options} dict or RewardSpecs (versions
    can depend on options and on the `reward_model` folder, e.g. the SWE scorer or the reward
    model weights; see build_reward). A Reward class
    whose options change no score is versioned without being built; a spec's reward is built with
    `build_reward`, so the stage that scores with it reuses that instance."""
    from rewards.base import Reward, class_source_version

    out = {}
    for spec in _specs(specs):
        cls = reward_class(spec.name)
        if isinstance(cls, type) and issubclass(cls, Reward):
            static = inspect.getattr_static(cls, "version")
            if isinstance(static, str) and not spec.options:  # a hand-pinned class (test doubles)
                out[spec.name] = static
                continue
            if static is inspect.getattr_static(Reward, "version") and cls.version_options is Reward.version_options:
                out[spec.name] = class_source_version(cls)
                continue
        out[spec.name] = reward_version(build_reward(spec, keep=not isinstance(spec, _Named), reward_model=reward_model))
    return out


def reward_version(reward: Any) -> str:
    """A reward's `version`; for a bare callable, the source digest of its module."""
    version = getattr(reward, "version", None)
    if isinstance(version, str) and version:
        return version
    from rewards.function import FunctionReward

    return FunctionReward(reward, getattr(reward, "__name__", "reward")).version


def reward_code_versions(specs: Iterable[Any] | dict[str, dict[str, Any]]) -> dict[str, str]:
    """{name: source digest[-options hash]} of rewards, for Dagster `code_version`s.

    Cheap enough for definition time: nothing is imported, built or loaded (no reward model,
    no sandbox, no user module run); the digest covers the reward's module and the local code
    it imports (spec.hashing.source_version), so editing it makes the assets that use it stale.
    `specs`: names, a {name: options} dict, or recipe RewardSpecs.
    """
    from spec.hashing import SourceNotFoundError, source_version, stable_hash

    out = {}
    for spec in _specs(specs):
        options = dict(spec.options or {})
        target = REWARDS[spec.name].target if spec.name in REWARDS else spec.name
        try:
            digest = source_version(target)
        except (SourceNotFoundError, EntryPointError):  # not locatable without running it
            digest = reward_versions([spec])[spec.name]
        out[spec.name] = f"{digest}-{stable_hash(options, 8)}" if options else digest
    return out
