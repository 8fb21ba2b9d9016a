"""The held-out multi-domain eval sets (mcqa / tool_call / structured_output): 128 rows each, no
problem or prompt shared with the RL generators, no RL prompt lost to 9-gram decontamination
against them, and every row scored by its eval reward through the eval path (eval_rows +
trainer.evaluate reward columns): the reference gets 1.0, a wrong answer 0.0."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from curation.decontam import decontaminate_table
from curation.decontam_index import BenchmarkIndex
from curation.prompts import eval_rows
from curation.samples import GENERATORS
from curation.samples.multi_domain import CITIES, EVAL_CITIES
from rewards.registry import get_reward
from spec.kinds import eval_reward_for
from trainer.evaluate import reward_columns

DOMAINS = ("mcqa", "tool_call", "structured_output")


@pytest.mark.parametrize("domain", DOMAINS)
def test_eval_sets_have_128_distinct_rows_disjoint_from_rl(domain: str) -> None:
    ev, rl = GENERATORS[f"{domain}_eval"](0), GENERATORS[f"{domain}_rl"](0)
    assert len(ev) == 128 and len({r["prompt"] for r in ev}) == 128
    assert set(ev[0]) == set(rl[0])  # the RL rows' public fields
    assert not {r["prompt"] for r in ev} & {r["prompt"] for r in rl}
    assert GENERATORS[f"{domain}_eval"](0) == ev and GENERATORS[f"{domain}_eval"](1) != ev  # seeded


def test_eval_tool_calls_are_disjoint_calls_and_use_their_own_cities() -> None:
    ev, rl = GENERATORS["tool_call_eval"](0), GENERATORS["tool_call_rl"](0)
    assert not {r["reference_call"] for r in ev} & {r["reference_call"] for r in rl}
    calls = [json.loads(r["reference_call"]) for r in ev]
    assert {c["name"] for c in calls} == {"get_weather", "convert_currency", "set_timer"}
    cities = {c["arguments"]["city"] for c in calls if c["name"] == "get_weather"}
    assert cities <= set(EVAL_CITIES) and not cities & set(CITIES)


@pytest.mark.parametrize("domain", DOMAINS)
def test_rl_prompts_survive_decontamination_against_the_eval_prompts(domain: str) -> None:
    """The recipes hash only the eval prompts (`fields: [prompt]`); no RL row of any domain shares a 9-gram."""
    evals = {d: pa.Table.from_pylist(GENERATORS[f"{d}_eval"](0)) for d in DOMAINS}
    index = BenchmarkIndex.build(evals, n=9, fields={d: ["prompt"] for d in DOMAINS})
    kept, hits = decontaminate_table(pa.Table.from_pylist(GENERATORS[f"{domain}_rl"](0)), index, None)
    assert hits == [] and kept.num_rows == len(GENERATORS[f"{domain}_rl"](0))


def _wrong(domain: str, row: dict) -> str:
    if domain == "mcqa":
        return "Answer: " + ("A" if row["answer"] != "A" else "B")
    if domain == "tool_call":
        call = json.loads(row["reference_call"])
        call["arguments"] = {k: (v + 1 if isinstance(v, int) else v + "x") for k, v in call["arguments"].items()}
        return f"<tool_call>{json.dumps(call)}</tool_call>"
    return json.dumps({"name": "Ana", "age": "thirty", "city": "Lima", "member": True})  # age is not an integer


def _right(domain: str, row: dict) -> str:
    if domain == "mcqa":
        return f"Answer: {row['answer']}"
    if domain == "tool_call":
        return f"<tool_call>{row['reference_call']}</tool_call>"
    return json.dumps({"name": "Ana", "age": 30, "city": "Lima", "member": False})


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_eval_row_is_scored_by_its_eval_reward(domain: str) -> None:
    rows = eval_rows(pa.Table.from_pylist(GENERATORS[f"{domain}_eval"](0)), "multi_domain", f"eval_{domain}",
                     domain=domain)
    assert set(rows.column("domain").to_pylist()) == {domain}  # not the kind's first domain
    reward = get_reward(eval_reward_for(domain))
    prompts, columns, raw = rows.column("prompt").to_pylist(), reward_columns(rows), rows.to_pylist()
    right = reward.score(prompts, [_right(domain, r) for r in raw], **columns)
    wrong = reward.score(prompts, [_wrong(domain, r) for r in raw], **columns)
    assert [r.score for r in right] == [1.0] * 128, {r.reason for r in right}
    assert [r.score for r in wrong] == [0.0] * 128, {r.reason for r in wrong}
