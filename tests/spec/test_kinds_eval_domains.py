"""Stage kinds with several held-out eval domains: `eval_domains`, `eval_reward_for`,
`kind_for_eval_domain` on the extras, and the registration clash checks covering them."""

from __future__ import annotations

import pytest

from spec.kinds import (
    StageKind,
    UnknownStageKindError,
    eval_reward_for,
    kind_for_eval_domain,
    register_stage_kind,
    stage_kind,
    unregister_stage_kind,
)


def _toy(**kw) -> StageKind:
    return StageKind("toy_multi", "rl", ("math",), "trainer.grpo:GRPOTrainer", **kw)


@pytest.fixture
def cleanup():
    yield
    unregister_stage_kind("toy_multi")


def test_eval_domains_lists_the_main_domain_then_the_extras() -> None:
    assert stage_kind("multi_domain").eval_domains == ["mcqa", "tool_call", "structured_output"]
    assert stage_kind("math").eval_domains == ["math"]
    assert stage_kind("mopd").eval_domains == [] and stage_kind("sft").eval_domains == []


def test_eval_reward_for_each_domain() -> None:
    assert [eval_reward_for(d) for d in ("mcqa", "tool_call", "structured_output")] == \
        ["mcqa", "tool_call", "structured_output"]
    assert eval_reward_for("rm") == "rm" and eval_reward_for("ifeval") == "ifeval"
    assert kind_for_eval_domain("structured_output").name == "multi_domain"
    with pytest.raises(UnknownStageKindError, match="tool_call"):  # the known list names the extras too
        kind_for_eval_domain("poetry")


def test_extra_domain_with_its_own_reward(cleanup) -> None:
    register_stage_kind(_toy(eval_domain="toy_a", eval_reward="math", extra_eval_domains=(("toy_b", "code"),)))
    assert kind_for_eval_domain("toy_b").name == "toy_multi"
    assert eval_reward_for("toy_a") == "math" and eval_reward_for("toy_b") == "code"


@pytest.mark.parametrize("kw,message", [
    ({"eval_domain": "toy_a", "eval_reward": "math", "extra_eval_domains": (("tool_call", "tool_call"),)},
     "eval domain 'tool_call' belongs to 'multi_domain'"),
    ({"eval_domain": "structured_output", "eval_reward": "math"}, "belongs to 'multi_domain'"),
    ({"eval_domain": "toy_a", "eval_reward": "math", "extra_eval_domains": (("code", "code"),)},
     "eval domain 'code' belongs to 'code'"),
    ({"eval_domain": "toy_a", "eval_reward": "math", "extra_eval_domains": (("toy_a", "code"),)}, "repeat"),
    ({"extra_eval_domains": (("toy_b", "code"),)}, "need an eval_domain"),
])
def test_clashes_with_extras_are_refused(cleanup, kw, message) -> None:
    with pytest.raises(ValueError, match=message):
        register_stage_kind(_toy(**kw))
    with pytest.raises(UnknownStageKindError):
        stage_kind("toy_multi")  # nothing half-registered


def test_every_eval_domain_is_scored_by_a_builtin_reward() -> None:
    from rewards.registry import REWARDS
    from spec.kinds import stage_kinds

    for kind in stage_kinds():
        assert all(eval_reward_for(d) in REWARDS for d in kind.eval_domains), kind.name
