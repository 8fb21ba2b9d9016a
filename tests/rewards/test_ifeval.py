"""IFEval verifier: every instruction type against cases transcribed from IFEval's own unit
tests and documented semantics, loose mode, aggregation, errors, throughput sanity."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from rewards.ifeval import IFEvalConfig, IFEvalReward, loose_variants
from rewards.ifeval_checks import INSTRUCTIONS

CASES = [json.loads(line) for line in (Path(__file__).parent / "data" / "ifeval_cases.jsonl").open()]

IFEVAL_25 = {
    "keywords:existence", "keywords:frequency", "keywords:forbidden_words", "keywords:letter_frequency",
    "language:response_language", "length_constraints:number_sentences", "length_constraints:number_paragraphs",
    "length_constraints:number_words", "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders", "detectable_content:postscript",
    "detectable_format:number_bullet_lists", "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
    "detectable_format:json_format", "detectable_format:title", "combination:two_responses",
    "combination:repeat_prompt", "startend:end_checker", "startend:quotation",
    "change_case:capital_word_frequency", "change_case:english_capital", "change_case:english_lowercase",
    "punctuation:no_comma",
}


def score(reward: IFEvalReward, response: str, ids: list[str], kwargs: object, prompt: object = None):
    return reward.score([prompt], [response], instruction_id_list=[ids], kwargs=[kwargs])[0]


def test_registry_is_exactly_ifevals_25_types() -> None:
    assert set(INSTRUCTIONS) == IFEVAL_25


def test_cases_cover_every_type_both_ways() -> None:
    per_type = Counter(c["instruction_id"] for c in CASES)
    assert set(per_type) == IFEVAL_25 and min(per_type.values()) >= 3 and len(CASES) >= 75
    verdicts = {(c["instruction_id"], c["expected"]) for c in CASES}
    one_sided = [i for i in IFEVAL_25 if (i, True) not in verdicts or (i, False) not in verdicts]
    # constrained_response is the only type whose reference tests are all positive; ours add a negative.
    assert one_sided == []


@pytest.mark.parametrize("case", CASES, ids=[f"{c['instruction_id']}-{i}" for i, c in enumerate(CASES)])
def test_strict_verdict_matches_reference(case: dict) -> None:
    # The check on the raw response, as IFEval's check_following sees it ...
    assert INSTRUCTIONS[case["instruction_id"]].bind(case["kwargs"])(case["response"]) is case["expected"]
    # ... and the reward on the same response (stripped, scored after </think>).
    result = score(IFEvalReward(), "<think>plan, then answer</think>" + case["response"],
                   [case["instruction_id"]], [case["kwargs"]])
    assert result.score == (1.0 if case["expected"] else 0.0)
    assert not result.infra_error


def test_loose_variants_are_ifevals_eight() -> None:
    variants = loose_variants("first *line*\nmiddle\nlast")
    assert variants == [
        "first *line*\nmiddle\nlast", "first line\nmiddle\nlast", "middle\nlast", "first *line*\nmiddle",
        "middle", "middle\nlast", "first line\nmiddle", "middle",
    ]


@pytest.mark.parametrize("response,iid,kwargs", [
    ('Sure! Here is the JSON:\n{"a": 1}', "detectable_format:json_format", {}),  # drop first line
    ('"Hello world"\nLet me know if you need more.', "startend:quotation", {}),  # drop last line
    ("Here you go:\nIt is 4. Any other questions?\nCheers", "startend:end_checker",
     {"end_phrase": "Any other questions?"}),  # drop the last line (or both)
    ("**Write a CL description.** Done.", "combination:repeat_prompt",
     {"prompt_to_repeat": "Write a CL description."}),  # strip asterisks
])
def test_loose_rescues_what_strict_rejects(response: str, iid: str, kwargs: dict) -> None:
    assert score(IFEvalReward(mode="strict"), response, [iid], [kwargs]).score == 0.0
    loose = score(IFEvalReward(mode="loose"), response, [iid], [kwargs])
    assert (loose.score, loose.reason) == (1.0, "correct")


def test_loose_still_rejects_a_real_violation() -> None:
    response = "Intro line\nA, B and C\nOutro line"
    assert score(IFEvalReward(mode="loose"), response, ["punctuation:no_comma"], [{}]).score == 0.0


IDS = ["punctuation:no_comma", "keywords:existence", "startend:end_checker"]
KW = [{}, {"keywords": ["tea"]}, {"end_phrase": "Bye."}]


def test_prompt_level_needs_all_and_instruction_level_is_the_fraction() -> None:
    both_missed = "I like coffee, honestly. Bye."
    prompt_level = score(IFEvalReward(), both_missed, IDS, KW)
    assert prompt_level.score == 0.0
    assert prompt_level.reason == "instruction_not_followed:punctuation:no_comma,keywords:existence"
    assert score(IFEvalReward(level="instruction"), both_missed, IDS, KW).score == pytest.approx(1 / 3)
    assert score(IFEvalReward(level="instruction"), "I like tea a lot. Bye.", IDS, KW).score == 1.0
    all_followed = score(IFEvalReward(), "I like tea a lot. Bye.", IDS, KW)
    assert (all_followed.score, all_followed.reason) == (1.0, "correct")


def test_only_the_text_after_think_is_scored() -> None:
    reward = IFEvalReward()
    assert score(reward, "<think>commas, commas, commas</think>No commas here", ["punctuation:no_comma"], [{}]).score == 1.0
    assert score(reward, "<think>none here</think>But, here", ["punctuation:no_comma"], [{}]).score == 0.0
    conversational = reward.score([None], [[{"role": "assistant", "content": "Plain text"}]],
                                  instruction_id_list=[["punctuation:no_comma"]], kwargs=[[{}]])[0]
    assert conversational.score == 1.0


@pytest.mark.parametrize("mode", ["strict", "loose"])
def test_unknown_instruction_is_an_error_never_a_pass(mode: str) -> None:
    result = score(IFEvalReward(mode=mode, level="instruction"), "Fine text",
                   ["punctuation:no_comma", "detectable_format:rephrase"], [{}, {}])
    assert (result.score, result.reason, result.infra_error) == (0.0, "unknown_instruction", True)
    assert "detectable_format:rephrase" in result.detail


@pytest.mark.parametrize("ids,kwargs,fragment", [
    (["keywords:frequency"], [{"keyword": "tea", "relation": "at least"}], "missing"),
    (["punctuation:no_comma"], [{"num_words": 3}], "unexpected"),
    (["length_constraints:number_words"], [{"num_words": "ten", "relation": "at least"}], "integer"),
    (["length_constraints:number_words"], [{"num_words": -1, "relation": "at least"}], "non-negative"),
    (["length_constraints:number_words"], [{"num_words": 3, "relation": "at most"}], "relation"),
    (["keywords:letter_frequency"], [{"letter": "ab", "let_frequency": 1, "let_relation": "at least"}], "single"),
    (["keywords:existence"], [{"keywords": "tea"}], "list"),
    (["length_constraints:nth_paragraph_first_word"],
     [{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "so"}], "nth_paragraph"),
    (["punctuation:no_comma", "startend:quotation"], [{}], "2 instructions"),
    (["punctuation:no_comma"], "[{not json", "JSON"),
    (["punctuation:no_comma"], [["not", "a", "dict"]], "dict"),
])
def test_bad_kwargs_are_reported(ids: list[str], kwargs: object, fragment: str) -> None:
    result = score(IFEvalReward(), "Some text", ids, kwargs)
    assert (result.score, result.reason, result.infra_error) == (0.0, "bad_kwargs", True)
    assert fragment in result.detail


def test_kwargs_as_json_string_and_hf_style_null_keys() -> None:
    hf_row = {"keywords": ["tea"], "num_words": None, "relation": None, "language": None}
    reward = IFEvalReward()
    assert score(reward, "Tea time", ["keywords:existence"], json.dumps([hf_row])).score == 1.0
    assert score(reward, "Tea time", ["keywords:existence"], [hf_row]).score == 1.0
    assert score(reward, "Tea time", json.dumps(["punctuation:no_comma"]), None).score == 1.0


def test_empty_response_and_missing_instructions() -> None:
    reward = IFEvalReward()
    empty = score(reward, "<think>all thought, no answer</think>   ", ["punctuation:no_comma"], [{}])
    assert (empty.score, empty.reason, empty.infra_error) == (0.0, "empty_response", False)
    none = score(reward, "text", [], [])
    assert (none.score, none.reason, none.infra_error) == (0.0, "no_instructions", True)
    no_column = reward.score([None], ["text"])[0]
    assert (no_column.reason, no_column.infra_error) == ("no_instructions", True)


def test_garbage_columns_never_raise() -> None:
    reward = IFEvalReward()
    out = reward.score([None] * 3, ["a", "b", "c"], instruction_id_list=[5, {"x": 1}, None], kwargs=[7, None, "{}"])
    assert [r.score for r in out] == [0.0, 0.0, 0.0] and all(r.infra_error for r in out)


def test_options_and_versions() -> None:
    versions = {IFEvalReward(mode=m, level=lv).version for m in ("strict", "loose") for lv in ("prompt", "instruction")}
    assert len(versions) == 4
    assert IFEvalReward(config=IFEvalConfig(mode="loose")).config.mode == "loose"
    with pytest.raises(ValueError):
        IFEvalReward(mode="lenient")
    with pytest.raises(ValueError):
        IFEvalReward(level="sentence")


def test_throughput_sanity_on_1000_completions() -> None:
    """1,000 mixed completions in loose mode (the slowest): one result each, deterministic."""
    rng = random.Random(0)
    pool = [c for c in CASES if c["instruction_id"] != "combination:repeat_prompt"]
    rows = [rng.sample(pool, 3) for _ in range(1000)]
    completions = ["<think>...</think>" + "\n\n".join(c["response"] for c in row) for row in rows]
    ids = [[c["instruction_id"] for c in row] for row in rows]
    kwargs = [json.dumps([c["kwargs"] for c in row]) for row in rows]
    reward = IFEvalReward(mode="loose", level="instruction")
    first = reward.score([None] * 1000, completions, instruction_id_list=ids, kwargs=kwargs)
    assert len(first) == 1000 and not any(r.infra_error for r in first)
    assert {r.score for r in first} <= {0.0, 1 / 3, 2 / 3, 1.0}
    assert 0 < sum(r.score == 1.0 for r in first) < 1000
    again = reward(None, completions, instruction_id_list=ids, kwargs=kwargs)
    assert again == [r.score for r in first]
