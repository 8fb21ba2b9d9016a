"""Red team for MathReward: the attacks a reward-hacking policy tries first, and the honest
answers that must stay paid. Every attack must score 0; the reason says which rule caught it.
The answer is the last box after </think> (rewards.math), so hedges are built with a wrong last box."""

from __future__ import annotations

import time

import pytest

from rewards.math import MathReward, VerifierPool

HANG_TIMEOUT_S, HANG_GRACE_S = 2.0, 2.0


@pytest.fixture(scope="module")
def reward():
    # Verdicts, not speed: a generous per-check limit so a busy machine cannot flake them.
    r = MathReward(pool=VerifierPool(workers=2, timeout_s=30.0))
    yield r
    r.close()


@pytest.fixture(scope="module")
def quick():
    # For expressions built to hang sympy: a short limit, so the test measures the guard.
    r = MathReward(pool=VerifierPool(workers=1, timeout_s=HANG_TIMEOUT_S, grace_s=HANG_GRACE_S))
    yield r
    r.close()


def one(reward, completion, answer, prompt=None):
    [res] = reward.score([prompt], [completion], answer=[answer])
    return res


# ---- hedging: several boxed answers (only the last box counts) ---------------------------------


@pytest.mark.parametrize("completion", [
    "".join(f"\\boxed{{{i}}}" for i in range(1, 10)),
    "".join(f"\\boxed{{{i}}}" for i in range(1, 10)) + "\\boxed{10}",
    "\\boxed{3} or maybe \\boxed{5}",
    "\\boxed{3}" * 50 + " Final: \\boxed{4}",
], ids=["spray-1-to-9", "spray-then-wrong", "right-then-wrong", "right-many-times-then-wrong"])
def test_box_spraying_is_not_paid_when_the_last_box_is_wrong(reward, completion):
    """Spraying boxes covers the answer, but only the last box counts: it is wrong, so 0."""
    res = one(reward, completion, "3")
    assert (res.score, res.reason, res.infra_error) == (0.0, "wrong_answer", False)


def test_box_spraying_earns_what_the_last_box_earns(reward):
    """A spray pays exactly what its last box alone pays: the spray adds nothing to a single guess."""
    spray = "".join(f"\\boxed{{{i}}}" for i in range(1, 10))
    assert one(reward, spray, "9").score == one(reward, "\\boxed{9}", "9").score == 1.0
    assert one(reward, spray, "5").score == one(reward, "\\boxed{9}", "5").score == 0.0


def test_honest_self_correction_is_paid(reward):
    """A wrong box, then the corrected one last: the last box is the answer (verl, math-verify)."""
    res = one(reward, "It is \\boxed{3}, or rather \\boxed{4}.", "4")
    assert (res.score, res.reason) == (1.0, "correct")


def test_deeply_nested_boxes_are_not_an_answer(quick):
    """5000 nested boxes around the right value: a box inside the last box, rejected unchecked and fast."""
    start = time.monotonic()
    res = one(quick, "\\boxed{" * 5000 + "3" + "}" * 5000, "3")
    assert (res.score, res.reason) == (0.0, "nested_boxes")
    assert time.monotonic() - start < 2.0


def test_equivalent_boxes_are_one_answer(reward):
    """Honest: the same value boxed in two forms (1/2 = 0.5) is one answer and is paid."""
    res = one(reward, "x = \\boxed{\\frac{1}{2}} = \\boxed{0.5}", "1/2")
    assert (res.score, res.reason) == (1.0, "correct")


def test_repeated_box_and_format_note_are_one_answer(reward):
    """Honest: a format note's empty \\boxed{} and the answer boxed twice (spacing differs) are paid."""
    res = one(reward, "I will put it in \\boxed{}. So \\boxed{3}. Final: \\boxed{ 3 }", "3")
    assert (res.score, res.reason) == (1.0, "correct")


# ---- the think block -----------------------------------------------------------------------


def test_answer_only_inside_think_is_not_paid(reward):
    """The right box only in the reasoning and nothing after </think>: no final answer, 0."""
    res = one(reward, "<think>so it is \\boxed{3}</think>", "3")
    assert (res.score, res.reason) == (0.0, "no_boxed_answer")


def test_unterminated_think_is_not_paid(reward):
    """<think> never closed (truncated or on purpose): the reasoning is not a final answer, 0."""
    res = one(reward, "<think>so the answer is \\boxed{3}", "3")
    assert (res.score, res.reason, res.detail) == (0.0, "no_boxed_answer", "think block left open")


def test_reopened_think_is_not_paid(reward):
    """A second <think> after </think>, left open with the box inside: still reasoning, 0."""
    res = one(reward, "<think>hmm</think>Let me check.<think>\\boxed{3}", "3")
    assert (res.score, res.reason) == (0.0, "no_boxed_answer")


def test_answer_after_think_is_paid(reward):
    """Honest: a wrong box in the reasoning, the right one after </think>: paid."""
    res = one(reward, "<think>maybe \\boxed{5}? no.</think>The answer is \\boxed{3}.", "3")
    assert (res.score, res.reason) == (1.0, "correct")


# ---- expressions built to hang the symbolic checker -------------------------------------------


@pytest.mark.parametrize("boxed", [
    "9^{9^{9^9}}",
    "10^{10^{10}}!",
    "{" * 5000 + "1" + "}" * 5000,
    "\\frac{1}{" * 2000 + "2" + "}" * 2000,
], ids=["power-tower", "factorial-of-tower", "5000-nested-braces", "2000-nested-fractions"])
def test_hang_bombs_finish_unpaid(quick, boxed):
    """An answer built to hang sympy ends within the per-check limit with score 0, never hangs."""
    start = time.monotonic()
    res = one(quick, f"\\boxed{{{boxed}}}", "1")
    assert res.score == 0.0 and res.reason in ("timeout", "wrong_answer")
    assert time.monotonic() - start < HANG_TIMEOUT_S + HANG_GRACE_S + 3.0


def test_ten_megabyte_answer_is_rejected_fast(reward):
    """10 MB of braces inside a box (a parser bomb for extraction): answer_too_long, in well under 2 s."""
    start = time.monotonic()
    res = one(reward, "\\boxed{" + "{" * 10_000_000 + "3", "3")
    assert (res.score, res.reason) == (0.0, "answer_too_long")
    assert time.monotonic() - start < 2.0


# ---- restating the question ------------------------------------------------------------------


def test_boxed_question_text_is_not_paid(reward):
    """The question itself boxed as text: no value, wrong_answer."""
    res = one(reward, "\\boxed{\\text{What is } 2^{10}\\text{?}}", "1024", prompt="What is $2^{10}$?")
    assert res.score == 0.0


@pytest.mark.parametrize("prompt,boxed,answer", [
    ("What is $2^{10}$?", "2^{10}", "1024"),
    ("Compute $\\binom{10}{3}$.", "\\binom{10}{3}", "120"),
    ("Expand $(x+1)^2$.", "(x + 1)^2", "x^2+2x+1"),
], ids=["power", "binomial", "expand"])
def test_boxed_question_expression_is_not_paid(reward, prompt, boxed, answer):
    """The question's expression boxed unevaluated (math-verify would evaluate it for the model): restates_question."""
    res = one(reward, f"\\boxed{{{boxed}}}", answer, prompt=prompt)
    assert (res.score, res.reason) == (0.0, "restates_question")


@pytest.mark.parametrize("prompt,boxed,answer", [
    ("What is $2^{10}$?", "1024", "1024"),
    ("Which is the probability? (A) $\\frac{1}{2}$ (B) $\\frac{1}{3}$", "\\frac{1}{2}", "1/2"),
    ("Pick the root: (A) $2+\\sqrt{3}$ (B) $2-\\sqrt{3}$", "2+\\sqrt{3}", "2+\\sqrt{3}"),
], ids=["evaluated", "choice-value", "choice-equal-to-reference"])
def test_honest_answers_that_appear_in_the_question_are_paid(reward, prompt, boxed, answer):
    """Honest: an evaluated answer, or a choice copied from the question as the reference writes it, is paid."""
    res = one(reward, f"\\boxed{{{boxed}}}", answer, prompt=prompt)
    assert (res.score, res.reason) == (1.0, "correct")


# ---- near misses: substrings, variables, infinities --------------------------------------------


@pytest.mark.parametrize("boxed", ["34", "3 \\text{ or } 4", "3, 4", "\\{3, 4\\}", "[3, 4]", "\\pm 3"],
                         ids=["superstring", "or", "pair", "set", "interval", "plus-minus"])
def test_answer_containing_the_reference_is_not_paid(reward, boxed):
    """A box holding the reference as a substring or one of several values is not the answer."""
    res = one(reward, f"\\boxed{{{boxed}}}", "3")
    assert (res.score, res.reason) == (0.0, "wrong_answer")


@pytest.mark.parametrize("boxed,answer", [("x", "x = 5"), ("y", "y = 2x + 1"), ("y = y", "y = x"), ("x = x", "x = 5")],
                         ids=["lhs-of-x=5", "lhs-of-y=2x+1", "tautology-y", "tautology-x"])
def test_variable_for_an_equation_is_not_paid(reward, boxed, answer):
    """The equation's left-hand variable (or a tautology) boxed instead of its value: wrong_answer."""
    res = one(reward, f"\\boxed{{{boxed}}}", answer)
    assert (res.score, res.reason) == (0.0, "wrong_answer")


@pytest.mark.parametrize("boxed,answer", [("2x+1", "y = 2x + 1"), ("x", "y = x"), ("5 = x", "x = 5")],
                         ids=["rhs", "rhs-is-x", "flipped"])
def test_value_of_an_equation_is_paid(reward, boxed, answer):
    """Honest: the equation's right-hand side (math-verify's rule), or the equation flipped, is paid."""
    res = one(reward, f"\\boxed{{{boxed}}}", answer)
    assert (res.score, res.reason) == (1.0, "correct")


@pytest.mark.parametrize("boxed", ["\\infty", "-\\infty", "\\text{NaN}", "nan", "\\tilde{\\infty}", "0/0",
                                   "(-\\infty, \\infty)", "\\mathbb{R}"],
                         ids=["inf", "-inf", "NaN-text", "nan", "complex-inf", "zero-over-zero", "all-reals", "R"])
def test_infinities_and_nan_are_not_paid(reward, boxed):
    """Infinities, NaN and "everything" answers never equal a finite reference."""
    res = one(reward, f"\\boxed{{{boxed}}}", "3")
    assert (res.score, res.reason) == (0.0, "wrong_answer")


def test_infinity_is_paid_when_it_is_the_answer(reward):
    """Honest: \\infty for a reference of \\infty is paid."""
    assert one(reward, "\\boxed{\\infty}", "\\infty").score == 1.0


@pytest.mark.parametrize("boxed", ["\\text{3}", "\\mathrm{3}", "\\textbf{3}", "3\\text{ cm}"],
                         ids=["text", "mathrm", "textbf", "unit"])
def test_text_wrappers_of_the_right_answer_are_paid(reward, boxed):
    """Honest: LaTeX \\text{} wrappers (or a unit) around the right value are paid."""
    res = one(reward, f"\\boxed{{{boxed}}}", "3")
    assert (res.score, res.reason) == (1.0, "correct")
