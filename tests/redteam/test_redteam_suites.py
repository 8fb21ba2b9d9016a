"""Red team across every verifier, from the shared case lists (tests/rewards/suites.py RED_TEAM):
each attack earns at most its `want` (0) and is never an infrastructure error the trainer would
skip. The honest side is tests/rewards/test_honest_answers.py."""

from __future__ import annotations

import os

import pytest

from tests.rewards.suites import RED_TEAM, Case, scored


@pytest.fixture(scope="module")
def verdicts() -> dict:
    with scored(RED_TEAM) as found:
        yield found


@pytest.mark.parametrize("case", RED_TEAM, ids=lambda c: f"{c.reward}/{c.id}")
def test_attack_is_not_paid(verdicts, case: Case) -> None:
    key = f"{case.reward}/{case.id}"
    if key not in verdicts:
        pytest.skip("sandbox needs root + bubblewrap")
    result = verdicts[key]
    assert result.score is not None and result.score <= case.want and not result.infra_error, result


def test_python_in_a_box_is_never_run(tmp_path) -> None:
    """math-verify parses the candidate's box with sympy; a Python call in it must stay text."""
    from rewards.math import MathReward, VerifierPool

    marker = tmp_path / "ran"
    reward = MathReward(pool=VerifierPool(workers=1, timeout_s=30.0))
    try:
        for box in (f"__import__('os').system('touch {marker}')", f"exec(\"open('{marker}', 'w')\")"):
            [result] = reward.score([None], [f"\\boxed{{{box}}}"], answer=["0"])
            assert result.score == 0.0 and not result.infra_error, result
    finally:
        reward.close()
    assert not os.path.exists(marker)
