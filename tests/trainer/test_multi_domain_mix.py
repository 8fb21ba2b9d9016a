"""Multi-domain RL: batches follow the recipe's domain mix; the stage runs with per-domain rewards."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.schemas import RL_SCHEMA
from spec.train import DEFAULT_MIX
from trainer.multi_domain import DomainMixOrder, MultiDomainConfig
from trainer.stage import run_stage

DOMAINS = ["mcqa"] * 30 + ["tool_call"] * 20 + ["structured_output"] * 10


def test_batches_follow_the_paper_mix():
    order = DomainMixOrder(DOMAINS, DEFAULT_MIX, seed=0)
    drawn = Counter()
    for step in range(10):  # 10 steps of 20 prompts: 11 / 6 / 3 per step at 55 / 30 / 15 %
        batch = order.take(20)
        counts = Counter(DOMAINS[i] for i in batch)
        assert counts == {"mcqa": 11, "tool_call": 6, "structured_output": 3}
        if step == 0:  # within an epoch of every domain, no prompt repeats
            assert len(set(batch)) == 20
        drawn += counts
    assert drawn == {"mcqa": 110, "tool_call": 60, "structured_output": 30}


def test_small_batches_stay_within_one_prompt_of_the_mix():
    order = DomainMixOrder(DOMAINS, {"mcqa": 2, "tool_call": 1, "structured_output": 1}, seed=1)
    seen = Counter()
    for step in range(1, 26):
        seen += Counter(DOMAINS[i] for i in order.take(3))
        total = 3 * step
        assert abs(seen["mcqa"] - total / 2) <= 1 and abs(seen["tool_call"] - total / 4) <= 1


def test_mix_and_prompt_set_must_agree():
    with pytest.raises(ValueError, match="no prompts"):
        DomainMixOrder(["mcqa"] * 4, DEFAULT_MIX, seed=0)
    with pytest.raises(ValueError, match="does not name"):
        DomainMixOrder(["mcqa", "math"], {"mcqa": 1.0}, seed=0)


def test_resume_state_round_trips():
    a = DomainMixOrder(DOMAINS, DEFAULT_MIX, seed=3)
    a.take(7)
    b = DomainMixOrder(DOMAINS, DEFAULT_MIX, seed=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert a.take(13) == b.take(13)


def test_stage_runs_with_domain_rewards(tiny_model_dir, tmp_path, cascade_home):
    from curation.samples import records

    rows = []
    for gen, domain in (("mcqa_rl", "mcqa"), ("tool_call_rl", "tool_call"), ("structured_output_rl", "structured_output")):
        for k, r in enumerate(records(gen)[:6]):
            rows.append({"row_id": f"{domain}-{k}", "source": gen, "domain": domain, "mode": "no_think", **r})
    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=RL_SCHEMA), path)
    config = MultiDomainConfig(policy=str(tiny_model_dir), dataset=str(path), output_dir=str(tmp_path / "out"),
                               rewards=["mcqa", "tool_call", "structured_output"], mix={"mcqa": 2, "tool_call": 1,
                               "structured_output": 1}, max_steps=2, prompts_per_step=4, num_generations=2,
                               max_new_tokens=8, seed=0, tensorboard=False, dtype="fp32", reward_cache="off")
    result = run_stage(config)
    assert result.summary["drawn"] == {"mcqa": 4, "tool_call": 2, "structured_output": 2}
    audit = pq.read_table(result.output_dir / "rollouts.parquet").to_pylist()
    assert len(audit) == 2 * 4 * 2
    for row in audit:  # each rollout scored by its own domain's reward; the others are not applicable
        applicable = [r for r in row["rewards"] if r["reason"] != "other_domain"]
        assert len(applicable) == 1
