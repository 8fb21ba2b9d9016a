"""False negatives count as defects: honest answers (self-corrections, equivalent forms, answers
that restate the question, long valid responses) must be paid by every verifier. Cases in
tests/rewards/suites.py (HONEST); the red-team side is tests/redteam/test_redteam_suites.py."""

from __future__ import annotations

import pytest

from tests.rewards.suites import HONEST, Case, scored


@pytest.fixture(scope="module")
def verdicts() -> dict:
    with scored(HONEST) as found:
        yield found


def test_every_verifier_has_an_honest_suite() -> None:
    assert {c.reward for c in HONEST} == {"math", "code", "ifeval", "swe", "mcqa", "structured_output", "tool_call"}
    assert len({(c.reward, c.id) for c in HONEST}) == len(HONEST)


@pytest.mark.parametrize("case", HONEST, ids=lambda c: f"{c.reward}/{c.id}")
def test_honest_answer_is_paid(verdicts, case: Case) -> None:
    key = f"{case.reward}/{case.id}"
    if key not in verdicts:
        pytest.skip("sandbox needs root + bubblewrap")
    result = verdicts[key]
    assert result.score == pytest.approx(case.want) and not result.infra_error, result
