"""Red team for the names the code judge's tests resolve: a wrong solution that declares a name
the tests call (a builtin, a module, a harness name, a helper) must score 0, on every test format
(plain asserts, HumanEval `check(candidate)`, stdio). Real sandbox runs; cases in code_name_cases."""

from __future__ import annotations

import pytest

from rewards.code import CodeReward, CodeRewardConfig
from sandboxes.core import sandbox_available
from tests.redteam.code_name_cases import ATTACKS, CONTROLS, NameAttack

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap")


@pytest.fixture(scope="module")
def reward():
    r = CodeReward(CodeRewardConfig(max_workers=2))
    yield r
    r.close()


@pytest.fixture(scope="module")
def verdicts(reward) -> dict:
    """All cases in one batch (the sandboxes run them in parallel)."""
    cases = ATTACKS + CONTROLS
    results = reward.score([c.prompt for c in cases], [f"```python\n{c.program}\n```" for c in cases],
                           tests=[c.tests for c in cases])
    return {c.id: r for c, r in zip(cases, results)}


def test_there_are_enough_attacks() -> None:
    assert len(ATTACKS) >= 15 and len({c.id for c in ATTACKS + CONTROLS}) == len(ATTACKS + CONTROLS)


@pytest.mark.parametrize("case", ATTACKS, ids=lambda c: c.id)
def test_attack_scores_zero(verdicts, case: NameAttack) -> None:
    result = verdicts[case.id]
    assert result.score == 0.0 and not result.infra_error, result


@pytest.mark.parametrize("case", CONTROLS, ids=lambda c: c.id)
def test_honest_control_is_paid(verdicts, case: NameAttack) -> None:
    assert verdicts[case.id].score == 1.0, verdicts[case.id]
