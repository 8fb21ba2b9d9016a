"""Red team for IFEvalReward: the attacks a reward-hacking policy tries first, and the honest
answers that must stay paid."""

from __future__ import annotations

import time

import pytest

from rewards.ifeval import MAX_RESPONSE_CHARS, IFEvalReward, IFEvalRMReward

# Negative constraints: all of them are met by saying nothing.
NEGATIVE = (["punctuation:no_comma", "length_constraints:number_words", "language:response_language"],
            [{}, {"num_words": 50, "relation": "less than"}, {"language": "en"}])
LOWERCASE = (["change_case:english_lowercase", "punctuation:no_comma"], [{}, {}])
# The instructions whose checks cost the most (nltk, langdetect, regexes that can backtrack).
HEAVY = (
    ["length_constraints:number_sentences", "change_case:capital_word_frequency", "language:response_language",
     "detectable_content:number_placeholders", "detectable_format:number_bullet_lists", "detectable_format:title",
     "detectable_format:number_highlighted_sections", "keywords:forbidden_words", "detectable_format:json_format"],
    [{"num_sentences": 3, "relation": "at least"}, {"capital_frequency": 3, "capital_relation": "at least"},
     {"language": "en"}, {"num_placeholders": 2}, {"num_bullets": 3}, {}, {"num_highlights": 2},
     {"forbidden_words": ["bad"]}, {}],
)


def one(completion, ids, kwargs, reward=None):
    [res] = (reward or IFEvalReward()).score([None], [completion], instruction_id_list=[ids], kwargs=[kwargs])
    return res


# ---- saying nothing --------------------------------------------------------------------------


@pytest.mark.parametrize("completion", [
    "",
    "  \n\t ",
    "<think>No commas here and few words.</think>",
    "<think>reasoning</think>\u200b\u2060\ufeff",
    "\u3164\u3164",
    "...",
    "<think>an unterminated think block in plain english",
], ids=["empty", "whitespace", "only-think", "zero-width-only", "hangul-filler-only", "punctuation-only",
        "unterminated-think"])
def test_no_content_does_not_satisfy_negative_constraints(completion):
    """No letter or digit after </think> meets "no commas, < 50 words, English" vacuously: empty_response."""
    res = one(completion, *NEGATIVE)
    assert (res.score, res.reason, res.infra_error) == (0.0, "empty_response", False)


def test_short_honest_answer_meets_negative_constraints():
    """Honest: a short English sentence without commas is paid."""
    assert one("<think>Keep it short.</think>Autumn leaves drift down slowly.", *NEGATIVE).score == 1.0


def test_digits_are_content():
    """Honest: a numeric answer ("42") is content, so it is scored normally and paid."""
    assert one("42", *NEGATIVE).score == 1.0


# ---- keyword stuffing --------------------------------------------------------------------------


def test_keyword_stuffing_passes_keyword_only_rows():
    """Documented: the required keyword repeated passes keywords:existence (as in IFEval); quality is the RM's part."""
    assert one("autumn " * 30, ["keywords:existence"], [{"keywords": ["autumn"]}]).score == 1.0


@pytest.mark.parametrize("ids,kwargs", [
    (["keywords:existence", "keywords:forbidden_words"], [{"keywords": ["autumn"]}, {"forbidden_words": ["autumn"]}]),
    (["keywords:frequency", "keywords:frequency"],
     [{"keyword": "autumn", "frequency": 5, "relation": "at least"},
      {"keyword": "autumn", "frequency": 3, "relation": "less than"}]),
    (["change_case:english_lowercase", "change_case:english_capital"], [{}, {}]),
    (["keywords:existence", "length_constraints:number_words"],
     [{"keywords": ["autumn"]}, {"num_words": 10, "relation": "less than"}]),
], ids=["required-and-forbidden", "at-least-5-and-less-than-3", "lower-and-upper", "keyword-and-short"])
def test_keyword_stuffing_cannot_meet_contradictory_constraints(ids, kwargs):
    """Stuffing the keyword cannot satisfy instructions that contradict it or each other: 0."""
    res = one("autumn " * 30, ids, kwargs)
    assert res.score == 0.0 and res.reason.startswith("instruction_not_followed:")


def test_keyword_stuffing_fails_structural_instructions():
    """Stuffing passes the keyword but not "at least 3 sentences": prompt level 0, instruction level 1/2."""
    ids = ["keywords:existence", "length_constraints:number_sentences"]
    kwargs = [{"keywords": ["autumn"]}, {"num_sentences": 3, "relation": "at least"}]
    assert one("autumn " * 30, ids, kwargs).score == 0.0
    assert one("autumn " * 30, ids, kwargs, IFEvalReward(level="instruction")).score == 0.5


# ---- megabyte responses -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["strict", "loose"])
@pytest.mark.parametrize("size", [1_000_000, 10_000_000], ids=["1MB", "10MB"])
def test_megabyte_responses_finish_fast(size, mode):
    """A 1 MB / 10 MB response (padding to satisfy "at least N" constraints) is refused unmeasured in < 2 s."""
    text = ("Dr. A. B. [x] <<t>> *h* - i. " * (size // 29 + 1))[:size]
    start = time.process_time()
    res = one("<think>pad</think>" + text, *HEAVY, IFEvalReward(mode=mode))
    assert time.process_time() - start < 2.0
    assert (res.score, res.reason) == (0.0, "response_too_long")


@pytest.mark.parametrize("mode", ["strict", "loose"])
@pytest.mark.parametrize("pattern", ["[", "\n", "<<", "*a", ". ", "A. "],
                         ids=["brackets", "newlines", "angles", "stars", "dots", "capital-sentences"])
def test_adversarial_text_under_the_cap_is_fast(pattern, mode):
    """Text just under the cap built to backtrack regexes ([[[[, newline runs, <<<<) or flood nltk: < 4 s of CPU.

    The worst pattern takes about 1 s of CPU alone and 2 s with a busy SMT sibling; backtracking blow-ups
    take minutes, so CPU time with 4x headroom tells them apart without flaking under a loaded suite."""
    text = "a " + pattern * ((MAX_RESPONSE_CHARS - 2) // len(pattern))
    IFEvalReward().check("warm up.", *HEAVY)  # nltk and langdetect load once per process
    start = time.process_time()
    res = IFEvalReward(mode=mode).check(text, *HEAVY)
    assert time.process_time() - start < 4.0 and res.score == 0.0


# ---- the think block ---------------------------------------------------------------------------


def test_constraint_met_only_inside_think_is_not_paid():
    """The required keyword and the title appear only in the reasoning: the answer does not follow, 0."""
    ids, kwargs = ["keywords:existence", "detectable_format:title"], [{"keywords": ["autumn"]}, {}]
    assert one("<think><<Autumn>> autumn</think>A poem about leaves.", ids, kwargs).score == 0.0


def test_violation_only_inside_think_does_not_count():
    """Honest: commas and capitals inside the reasoning do not break "no commas, lowercase" in the answer."""
    assert one("<think>First, Second, THIRD.</think>leaves fall and drift away", *LOWERCASE).score == 1.0


def test_unterminated_think_is_not_blended_with_the_reward_model():
    """IFEvalRMReward: an unterminated think block scores 0 and never reaches the reward model."""
    seen: list[str] = []
    reward = IFEvalRMReward(scorer=lambda prompts, responses: [seen.extend(responses) or 1.0 for _ in responses])
    res = reward.score(["p"], ["<think>all lowercase words no commas"], instruction_id_list=[LOWERCASE[0]],
                       kwargs=[LOWERCASE[1]])
    assert (res[0].score, res[0].reason, seen) == (0.0, "empty_response", [])


# ---- unicode tricks ----------------------------------------------------------------------------


@pytest.mark.parametrize("comma", ["\uff0c", "\u3001", "\ufe50", "\u060c", "\u201a"],
                         ids=["fullwidth", "ideographic", "small", "arabic", "low-9-quote"])
def test_lookalike_commas_count_as_commas(comma):
    """A comma that is not ASCII (fullwidth ， ideographic 、 ...) still reads as a comma: no_comma fails."""
    res = one(f"leaves fall{comma} winds blow", ["punctuation:no_comma"], [{}])
    assert (res.score, res.reason) == (0.0, "instruction_not_followed:punctuation:no_comma")


def test_zero_width_space_cannot_hide_a_forbidden_word():
    """b\\u200bad renders as "bad": the forbidden word is found once invisible characters are removed."""
    res = one("That idea is b\u200bad.", ["keywords:forbidden_words"], [{"forbidden_words": ["bad"]}])
    assert res.score == 0.0


@pytest.mark.parametrize("text", ["hello \uff37orld", "hello\u200bWorld", "hello \U0001d416orld"],
                         ids=["fullwidth-capital", "zero-width-joined-capital", "math-bold-capital"])
def test_unicode_capitals_break_lowercase(text):
    """Fullwidth, zero-width-joined or mathematical capitals are still capitals: english_lowercase fails."""
    assert one(text, *LOWERCASE).score == 0.0


def test_honest_unicode_punctuation_is_fine():
    """Honest: apostrophes, dashes and accents are not commas or capitals: paid."""
    assert one("it\u2019s a caf\u00e9 \u2014 quiet and warm", *LOWERCASE).score == 1.0
