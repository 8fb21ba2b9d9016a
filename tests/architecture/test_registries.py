"""The registries agree with each other: every name one of them points at exists in the other."""

from __future__ import annotations

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
    trainer, config = import_target(kind.trainer), import_target(kind.config)
    if kind.family == "reward_model":  # a function (policy, preferences, output, RMConfig)
        assert callable(trainer) and config.__name__ == "RMConfig"
        return
    from spec.train import StageOptions
    from trainer.base import TrainerBase
    from trainer.config import RunFields

    assert issubclass(config, RunFields) and import_target(config.trainer_class) is trainer
    assert issubclass(trainer, TrainerBase)  # so it follows trainer.base.Trainer
    assert isinstance(trainer.algorithm, str) and trainer.algorithm
    assert kind.options is None or issubclass(kind.options, StageOptions)


def test_every_backend_restriction_names_a_registered_backend_and_a_trainer_algorithm() -> None:
    from trainer.stage import ALGORITHMS, BACKENDS, backend_algorithms

    algorithms = {import_target(k.trainer).algorithm for k in stage_kinds() if k.family != "reward_model"}
    assert set(ALGORITHMS) <= set(BACKENDS) and set(backend_algorithms()) == set(BACKENDS)
    assert all(set(runs) <= algorithms for runs in ALGORITHMS.values())
    assert all(set(k.backends) <= set(BACKENDS) for k in stage_kinds())


def test_every_builtin_reward_has_an_option_model() -> None:
    from rewards.registry import REWARDS, options_model, reward_class

    for name in REWARDS:
        model = options_model(reward_class(name))
        assert model.model_validate({}), name  # every option has a default
