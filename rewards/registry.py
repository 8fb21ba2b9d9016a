"""Reward names -> classes, imported only when asked for.

Recipes and the CLI name rewards by string (`math`, `code`, ...). The registry maps each
name to a "module:Class" path and imports it in `get_reward`, so importing the registry
costs nothing (no torch, sandbox or sentence-transformers import at CLI start-up).
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable

from rewards.base import Reward

REWARDS: dict[str, str] = {
    "math": "rewards.math:MathReward",
    "ifeval": "rewards.ifeval:IFEvalReward",
    "ifeval_rm": "rewards.ifeval:IFEvalRMReward",
    "code": "rewards.code:CodeReward",
    "swe": "rewards.swe:SweReward",
    "rm": "rewards.reward_model:RMReward",
}
"""Registry name -> "module:Class" of its Reward subclass."""


class UnknownRewardError(ValueError):
    """A reward name that is not in REWARDS."""


def reward_class(name: str) -> type[Reward]:
    """The Reward subclass registered as `name` (imports its module now).

    >>> reward_class("math").__name__
    'MathReward'
    """
    if name not in REWARDS:
        raise UnknownRewardError(f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}")
    module, _, attr = REWARDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def get_reward(name: str, **options: Any) -> Reward:
    """Build the reward registered as `name` with its constructor options.

    >>> get_reward("swe", similarity="lexical").version
    '1-lexical'
    """
    return reward_class(name)(**options)


def reward_versions(names: Iterable[str] | dict[str, dict[str, Any]]) -> dict[str, str]:
    """{name: version} for lineage records; a dict maps names to their options (versions
    can depend on options, e.g. the SWE scorer or the reward model path)."""
    specs = names if isinstance(names, dict) else {n: {} for n in names}
    out = {}
    for name, options in specs.items():
        cls = reward_class(name)
        version = cls.__dict__.get("version")
        out[name] = version if isinstance(version, str) and not options else get_reward(name, **(options or {})).version
    return out
