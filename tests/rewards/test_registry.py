"""Registry: names, lazy imports, versions, clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rewards.base import Reward
from rewards.registry import (
    REWARDS,
    UnknownRewardError,
    get_reward,
    reward_class,
    reward_code_versions,
    reward_versions,
)


def test_names_resolve_to_reward_classes():
    assert set(REWARDS) == {"math", "ifeval", "ifeval_rm", "code", "swe", "rm", "mcqa", "structured_output", "tool_call"}
    for name in REWARDS:
        cls = reward_class(name)
        assert issubclass(cls, Reward) and cls.name == name


def test_get_reward_passes_options_and_versions_follow_them():
    lexical = get_reward("swe", similarity="lexical", threshold=0.5)
    assert lexical.threshold == 0.5
    versions = reward_versions({"swe": {"similarity": "lexical"}, "math": {}, "code": {}})
    assert versions["swe"] != reward_versions(["swe"])["swe"]
    assert versions["math"] == get_reward("math").version and versions["code"] == get_reward("code").version


def test_versions_are_derived_from_code_not_written_by_hand():
    for name in REWARDS:
        cls = reward_class(name)
        assert "version" not in vars(cls), f"{name}: a hand-written version"
    digests = reward_code_versions(list(REWARDS))
    # one digest per module: ifeval and ifeval_rm share theirs (their options part differs)
    modules = {entry.target.partition(":")[0] for entry in REWARDS.values()}
    assert len(set(digests.values())) == len(modules) and digests["ifeval"] == digests["ifeval_rm"]
    assert reward_versions(["math"])["math"] == digests["math"]  # no option changes math's scores
    assert get_reward("ifeval", mode="loose").version == digests["ifeval"] + "-loose-prompt"
    assert reward_code_versions({"swe": {"similarity": "lexical"}})["swe"] != digests["swe"]


def test_unknown_name_is_a_clear_error():
    with pytest.raises(UnknownRewardError, match="unknown reward 'maths'.*math"):
        get_reward("maths")


def test_importing_the_registry_is_cheap():
    code = ("import sys, rewards.registry; heavy = [m for m in ('torch', 'sentence_transformers', 'math_verify',"
            " 'transformers', 'sandboxes', 'dagster') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
