"""Reward names -> classes, imported only when asked for, and the catalog the recipe checks.

Recipes and the CLI name rewards by string (`math`, `code`, ...) or by import path
(`package.module:attr`, a Reward class, an instance or a plain TRL-style function). The
registry maps each built-in name to a "module:Class" path and imports it in `get_reward`, so
importing the registry costs nothing (no torch, sandbox or sentence-transformers import at CLI
start-up).

Options: every reward has an option model, its own `Options` class when it declares one, else
derived from its constructor's signature (names, types, defaults). `check_reward` validates a
recipe's options against it without building the reward; `CATALOG` hands that check to the
recipe loader, so a misspelt option fails at load with its field path, before anything runs.
Adding a reward: a Reward subclass in its own module plus one line in `REWARDS`.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from spec.entry_points import EntryPointError, import_target


@dataclass(frozen=True)
class RewardEntry:
    """A built-in reward: where its class lives and what it needs from the recipe."""

    target: str
    """"module:Class" of its Reward subclass."""
    columns: tuple[str, ...] = ()
    """Row columns it reads besides the completion (a row without one scores 0, `missing_column:<c>`)."""
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
}
"""Built-in reward name -> entry."""


class UnknownRewardError(ValueError):
    """A reward name that is not in REWARDS and not an importable `module:attr`."""


def _import(target: str) -> Any:
    try:
        return import_target(target)
    except EntryPointError as err:
        raise UnknownRewardError(f"reward: {err}") from None


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
                             "(or give an import path `module:attr`)")


@lru_cache(maxsize=None)
def options_model(target: Any) -> type[BaseModel]:
    """The option model of a reward class: its `Options`, else one derived from `__init__`."""
    explicit = getattr(target, "Options", None)
    if isinstance(explicit, type) and issubclass(explicit, BaseModel):
        return explicit
    if not isinstance(target, type):  # an instance or a function takes no options
        return create_model(f"{getattr(target, '__name__', 'reward')}Options", __config__=ConfigDict(extra="forbid"))
    hints = typing.get_type_hints(target.__init__)
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


def check_reward(name: str, options: dict[str, Any] | None = None) -> None:
    """Raise ValueError unless `name` resolves and `options` fit its option model."""
    _validated(name, dict(options or {}))


def get_reward(name: str, **options: Any) -> Any:
    """Build the reward `name` with validated options (an instance or function is returned as is).

    >>> get_reward("swe", similarity="lexical").version
    '1-lexical'
    """
    target, values = _validated(name, options)
    return target(**values) if isinstance(target, type) else target


def needs_reward_model(name: str) -> bool:
    """Whether reward `name` scores with the recipe's reward-model checkpoint."""
    return name in REWARDS and REWARDS[name].needs_reward_model


class _Catalog:
    """The recipe loader's view of the rewards (spec.recipe.RewardCatalog)."""

    check = staticmethod(check_reward)
    check_name = staticmethod(reward_class)
    needs_reward_model = staticmethod(needs_reward_model)


CATALOG = _Catalog()


def reward_versions(names: Iterable[str] | dict[str, dict[str, Any]]) -> dict[str, str]:
    """{name: version} for lineage records; a dict maps names to their options (versions
    can depend on options, e.g. the SWE scorer or the reward model path)."""
    specs = names if isinstance(names, dict) else {n: {} for n in names}
    out = {}
    for name, options in specs.items():
        cls = reward_class(name)
        version = cls.__dict__.get("version") if isinstance(cls, type) else None
        out[name] = version if isinstance(version, str) and not options else reward_version(get_reward(name, **(options or {})))
    return out


def reward_version(reward: Any) -> str:
    """A reward's `version`; for a plug-in without one, a hash of its source code."""
    version = getattr(reward, "version", None)
    if isinstance(version, str) and version:
        return version
    from spec.hashing import stable_hash

    target = reward if inspect.isfunction(reward) or isinstance(reward, type) else type(reward)
    try:
        return "src-" + stable_hash(inspect.getsource(target), 12)
    except (OSError, TypeError):
        return "unversioned"
