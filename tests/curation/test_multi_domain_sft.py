"""Cascade 2's SFT rows for the multi-domain formats: disjoint from the RL and eval rows, and each
response (both modes) earns full marks from the verifier multi-domain RL scores that domain with."""

from __future__ import annotations

import json

import pytest

from curation.samples import GENERATORS
from curation.samples import multi_domain as md
from curation.samples.common import SFT_SLOTS, draw, make_rng
from dagster_project.recipe import load_recipe
from rewards.registry import get_reward
from spec.paths import REPO_ROOT

CASES = {  # SFT generator -> (item maker, RL generator, eval generator, reward, the columns it reads)
    "mcqa_sft": (md._mcqa_sft, "mcqa_rl", "mcqa_eval", "mcqa", ("answer",)),
    "tool_call_sft": (md._tool_call_sft, "tool_call_rl", "tool_call_eval", "tool_call", ("tools", "reference_call")),
    "structured_output_sft": (md._structured_sft, "structured_output_rl", "structured_output_eval",
                              "structured_output", ("json_schema",)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sft_rows_are_new_problems_in_the_rl_wording(name: str) -> None:
    make, rl, ev, _reward, _columns = CASES[name]
    sft = GENERATORS[name](0)
    prompts = {r["prompt"] for r in sft}
    assert len(sft) == len(prompts) >= 60
    assert not prompts & {r["prompt"] for r in GENERATORS[rl](0)}
    assert not prompts & {r["prompt"] for r in GENERATORS[ev](0)}
    assert set(sft[0]) >= {"prompt", "think_response", "no_think_response"}
    assert all(r["think_response"].startswith("<think>\n") and "</think>\n" in r["think_response"] for r in sft)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_sft_response_earns_full_marks_from_the_rl_verifier(name: str) -> None:
    make, _rl, _ev, reward_name, columns = CASES[name]
    items = draw(make_rng(name, 0), {"mcqa_sft": 120, "tool_call_sft": 80}.get(name, 60), make, SFT_SLOTS)
    assert [i["prompt"] for i in items] == [r["prompt"] for r in GENERATORS[name](0)]  # the rows the file holds
    reward = get_reward(reward_name)
    for mode in ("think_response", "no_think_response"):
        scores = reward.score([i["prompt"] for i in items], [i[mode] for i in items],
                              **{c: [i[c] for i in items] for c in columns})
        assert [s.score for s in scores] == [1.0] * len(items), {s.reason for s in scores}


def test_tool_call_sft_arguments_keep_their_schema_types() -> None:
    # `amount` is a number and `minutes` an integer in the tools' schemas: a string would teach a 0 reward.
    for row in GENERATORS["tool_call_sft"](0):
        call = json.loads(row["no_think_response"].removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
        assert all(not isinstance(v, str) for k, v in call["arguments"].items() if k in ("amount", "minutes"))


def test_cascade2_sft_stage_reads_the_three_formats() -> None:
    recipe = load_recipe(REPO_ROOT / "recipes" / "cascade2.yaml")
    generated = {s.name: s.generate for s in recipe.sources}
    assert {generated[s] for s in recipe.sft_stages[0].sources} >= set(CASES)
