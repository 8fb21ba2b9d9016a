"""Registry: names, lazy imports, versions, clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rewards.base import Reward
from rewards.registry import REWARDS, UnknownRewardError, get_reward, reward_class, reward_versions


def test_names_resolve_to_reward_classes():
    assert set(REWARDS) == {"math", "ifeval", "ifeval_rm", "code", "swe", "rm"}
    for name in REWARDS:
        cls = reward_class(name)
        assert issubclass(cls, Reward) and cls.name == name


def test_get_reward_passes_options_and_versions_follow_them():
    lexical = get_reward("swe", similarity="lexical", threshold=0.5)
    assert lexical.threshold == 0.5
    versions = reward_versions({"swe": {"similarity": "lexical"}, "math": {}, "code": {}})
    assert versions["swe"] != reward_versions(["swe"])["swe"]
    assert versions["math"] == get_reward("math").version and versions["code"] == get_reward("code").version


def test_unknown_name_is_a_clear_error():
    with pytest.raises(UnknownRewardError, match="unknown reward 'maths'.*math"):
        get_reward("maths")


def test_importing_the_registry_is_cheap():
    code = ("import sys, rewards.registry; heavy = [m for m in ('torch', 'sentence_transformers', 'math_verify',"
            " 'transformers', 'sandboxes', 'dagster') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
