"""The registries agree with each other: every name one of them points at exists in the other."""

from __future__ import annotations

import typing

import pytest

from spec.entry_points import import_target
from spec.kinds import DOMAINS, stage_kinds


def test_every_domain_has_one_canonical_schema() -> None:
    from curation.schemas import DOMAIN_SCHEMAS

    assert tuple(DOMAIN_SCHEMAS) == DOMAINS


@pytest.mark.parametrize("kind", stage_kinds(), ids=lambda k: k.name)
def test_stage_kind_points_at_real_things(kind) -> None:
    from curation.schemas import RL_SCHEMA
    from rewards.registry import REWARDS

    assert set(kind.source_domains) <= set(DOMAINS)
    assert set(kind.prompt_columns) <= set(RL_SCHEMA.names)
    assert set(kind.default_rewards) <= set(REWARDS)
    assert kind.eval_reward is None or kind.eval_reward in REWARDS
    assert callable(import_target(kind.trainer))


def test_backends_registered_are_the_backends_a_config_accepts() -> None:
    from spec.train import StageSettings
    from trainer.backend_registry import BACKENDS

    accepted = set(typing.get_args(StageSettings.model_fields["backend"].annotation))
    assert accepted == set(BACKENDS)


def test_every_builtin_reward_has_an_option_model() -> None:
    from rewards.registry import REWARDS, options_model, reward_class

    for name in REWARDS:
        model = options_model(reward_class(name))
        assert model.model_validate({}), name  # every option has a default
