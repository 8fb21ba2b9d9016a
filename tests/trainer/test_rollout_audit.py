"""Rewards remembered: the reward cache in training and evals, rollouts.parquet, `cascade audit`."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rewards.base import Reward, RewardResult
from trainer.config import GRPOConfig
from trainer.grpo import GRPOTrainer
from trainer.rollout_audit import (
    ROLLOUT_SCHEMA,
    RolloutAudit,
    format_summary,
    read_rollouts,
    reward_rows,
    summarize_rollouts,
    summary_markdown,
)
from trainer.scoring import load_rewards
from trainer.stage import run_stage

FAKE = "tests.trainer.fake_rewards:"
PLAIN = "tests.trainer.test_rollout_audit:plain_reward"


def plain_reward(prompts, completions, **columns):
    """A TRL-style function reward: no `score()`, so no reasons and nothing to cache it by."""
    return [float(len(c) % 2) for c in completions]


class SimulatedKill(BaseException):
    """Stops a run the way kill -9 does for the trainer: nothing after it runs."""


def _run(grpo_kwargs, tmp_path, out: str, **extra):
    cfg = {**grpo_kwargs, "output_dir": str(tmp_path / out), "reward_cache": str(tmp_path / "cache.sqlite"), **extra}
    return run_stage(GRPOConfig(**cfg))


def _comparable(table: pa.Table) -> list[dict]:
    return table.select(["step", "prompt_id", "mode", "sample", "completion", "reward", "rewards"]).to_pylist()


def test_rollouts_table_and_second_run_hits_the_cache(grpo_kwargs, tmp_path, rl_parquet):
    rewards = [FAKE + "LengthReward", {"name": FAKE + "DigitReward", "weight": 0.5}, PLAIN]
    first = _run(grpo_kwargs, tmp_path, "a", rewards=rewards)
    table = read_rollouts(first.output_dir)
    assert table.schema.equals(ROLLOUT_SCHEMA) and table.num_rows == 2 * 2 * 4  # steps x prompts x G
    assert not (first.output_dir / "checkpoints").exists()  # the per-step parts went with the checkpoints
    rows = table.to_pylist()
    assert Counter(r["step"] for r in rows) == {0: 8, 1: 8}
    row_ids = set(pq.read_table(rl_parquet).column("row_id").to_pylist())
    assert {r["prompt_id"] for r in rows} <= row_ids and {r["mode"] for r in rows} <= {"think", "no_think"}
    versions = [(rec["name"], rec["version"]) for rec in json.loads(first.lineage_path.read_text())["rewards"]]
    for r in rows:
        assert [(e["name"], e["version"]) for e in r["rewards"]] == versions  # as in lineage.json
        length, digit, plain = r["rewards"]
        assert (length["reason"], digit["reason"], plain["reason"]) == ("ok", "ok", "scored")
        assert not any(e["infra_error"] for e in r["rewards"])
        assert length["score"] == pytest.approx(1 / (1 + len(r["completion"])))
        assert r["reward"] == pytest.approx(length["score"] + 0.5 * digit["score"] + plain["score"])
    assert [name for name, _ in versions] == [FAKE + "LengthReward", FAKE + "DigitReward", PLAIN]
    long = reward_rows(table)
    assert long.num_rows == 3 * table.num_rows and {"rollout", "name", "reason", "total_reward"} <= set(long.column_names)

    # Every (rollout, cached reward) was looked up. A bare function has nothing to key on and is not
    # cached, unless the registry adapts it into a Reward (rewards.function), which is.
    loaded, _, _ = load_rewards(GRPOConfig(**{**grpo_kwargs, "rewards": rewards}).rewards)
    lookups = 8 * sum(callable(getattr(r, "score", None)) for r in loaded)
    metrics = pq.read_table(first.metrics_path).to_pylist()
    assert all(m["reward_cache_hits"] + m["reward_cache_misses"] == lookups >= 16 for m in metrics)
    # Same config in another folder: same rollouts, every score from the cache, identical table.
    second = _run(grpo_kwargs, tmp_path, "b", rewards=rewards)
    again = pq.read_table(second.metrics_path).to_pylist()
    assert [(m["reward_cache_hits"], m["reward_cache_misses"]) for m in again] == [(lookups, 0)] * 2
    assert _comparable(read_rollouts(second.output_dir)) == _comparable(table)


def test_cache_off_scores_everything(grpo_kwargs, tmp_path):
    result = _run(grpo_kwargs, tmp_path, "off", max_steps=1, reward_cache="off")
    (row,) = pq.read_table(result.metrics_path).to_pylist()
    assert row["reward_cache_hits"] == row["reward_cache_misses"] == 0
    assert not (tmp_path / "cache.sqlite").exists()


def test_failing_reward_rows_carry_reason_and_infra_flag(grpo_kwargs, tmp_path):
    result = _run(grpo_kwargs, tmp_path, "boom", max_steps=1, rewards=[FAKE + "ExplodingReward", FAKE + "LengthReward"])
    rows = read_rollouts(result.output_dir).to_pylist()
    boom = [r["rewards"][0] for r in rows]
    assert all(e["reason"] == "reward_error" and e["infra_error"] and "boom" in e["detail"] for e in boom)
    summary = summarize_rollouts(result.output_dir)
    assert summary["rewards"][FAKE + "ExplodingReward"]["infra_errors"] == 8


def test_resume_after_kill_keeps_each_step_once(grpo_kwargs, tmp_path, monkeypatch):
    extra = {"max_steps": 4, "save_steps": 2}
    reference = read_rollouts(_run(grpo_kwargs, tmp_path, "ref", **extra).output_dir)
    original = GRPOTrainer.train_step

    def killed_after_step_2(self, step):
        values = original(self, step)
        if step == 2:  # step 2's rollouts are recorded, but its checkpoint (step_4) never comes
            raise SimulatedKill
        return values

    monkeypatch.setattr(GRPOTrainer, "train_step", killed_after_step_2)
    with pytest.raises(SimulatedKill):
        _run(grpo_kwargs, tmp_path, "killed", **extra)
    out = tmp_path / "killed"
    parts = sorted(p.name for p in (out / "checkpoints" / "rollouts").iterdir())
    assert parts == [f"step_{s:08d}.parquet" for s in range(3)] and (out / "checkpoints" / "step_2").is_dir()
    monkeypatch.setattr(GRPOTrainer, "train_step", original)
    resumed = _run(grpo_kwargs, tmp_path, "killed", resume=True, **extra)
    table = read_rollouts(resumed.output_dir)
    keys = [(r["step"], r["round"], r["prompt_id"], r["sample"]) for r in table.to_pylist()]
    assert len(keys) == len(set(keys)) == 4 * 8 and sorted({k[0] for k in keys}) == [0, 1, 2, 3]
    assert _comparable(table) == _comparable(reference)  # resumed = uninterrupted, rollout for rollout


def _rows(step: int, scores: list[float], reasons: list[str]) -> list[dict]:
    return [{"step": step, "round": 0, "prompt_id": f"p{k}", "mode": "think" if k % 2 else "no_think", "sample": k,
             "completion": f"answer {k} " + "x" * 300, "completion_tokens": 5, "truncated": False, "reward": s,
             "rewards": [{"name": "math", "version": "2", "weight": 1.0, "score": s, "reason": why,
                          "infra_error": False, "detail": None}]}
            for k, (s, why) in enumerate(zip(scores, reasons))]


def test_parts_from_a_rerun_step_on_are_dropped_and_summary(tmp_path):
    audit = RolloutAudit(tmp_path)
    for step in range(3):
        audit.write_step(step, _rows(step, [1.0, 0.0, 0.0], ["correct", "wrong_answer", "no_boxed_answer"]))
    resumed = RolloutAudit(tmp_path)  # a new process resuming from the checkpoint at step 1
    resumed.write_step(1, _rows(1, [1.0, 1.0], ["correct", "correct"]))
    path = resumed.finish()
    assert sorted(Counter(read_rollouts(path).column("step").to_pylist()).items()) == [(0, 3), (1, 2)]

    summary = summarize_rollouts(tmp_path, examples_per_reason=2, max_chars=40)
    assert summary["rollouts"] == 5 and summary["steps"] == {"count": 2, "first": 0, "last": 1}
    assert summary["reward"]["count"] == 5 and summary["reward"]["mean"] == pytest.approx(0.6)
    assert sum(summary["reward"]["histogram"]["counts"]) == 5 and summary["reward"]["quantiles"]["p50"] == 1.0
    math = summary["rewards"]["math"]
    assert math["versions"] == ["2"] and math["reasons"] == {"correct": 3, "wrong_answer": 1, "no_boxed_answer": 1}
    assert next(iter(math["reasons"])) == "correct"  # most frequent first
    examples = math["examples"]["correct"]
    assert [(e["step"], e["prompt_id"]) for e in examples] == [(0, "p0"), (1, "p1")]  # earliest and latest
    assert len(examples[0]["completion"]) == 40 and examples[0]["completion"].endswith("…")
    text, md = format_summary(summary), summary_markdown(summary)
    assert "total reward: n=5" in text and "wrong_answer" in text and "█" in text and "step 0  prompt p0" in text
    assert "| correct | 3 | 60.0% |" in md and "| reason | count |" in md
    json.dumps(summary)


class CountingReward(Reward):
    name, version = "eval_counting", "1"

    def __init__(self) -> None:
        self.seen = 0

    def _score_one(self, prompt, completion, row):
        self.seen += 1
        return RewardResult(float(len(completion) % 2), "odd" if len(completion) % 2 else "even")


def test_evals_go_through_the_cache(tiny_model_dir, tmp_path):
    from trainer.evaluate import EvalSet, evaluate_checkpoint

    table = pa.table({"row_id": ["0", "1"], "prompt": ["What is 2 plus 2?", "Say hi."], "answer": ["4", "hi"]})
    cache = tmp_path / "cache.sqlite"
    runs = []
    for batch_dependent in (False, False, True, True):
        reward = CountingReward()
        reward.batch_dependent = batch_dependent
        result = evaluate_checkpoint(tiny_model_dir, {"d": EvalSet(table, reward)}, modes=("no_think",),
                                     max_new_tokens=4, reward_cache=str(cache))
        runs.append((reward.seen, result))
    assert [seen for seen, _ in runs] == [2, 0, 2, 2]  # batch-dependent rewards pass through
    assert all(result == runs[0][1] for _, result in runs)


def test_cascade_audit_cli(grpo_kwargs, cascade_home, tiny_model_dir, capsys):
    from dagster_project.cli import main

    out = cascade_home / "checkpoints" / "audit_rl" / "v1"  # the platform's layout: checkpoints/<stage>/<version>
    # the platform names the record after the folder (config.lineage); a record that disagrees is refused
    run_stage(GRPOConfig(**{**grpo_kwargs, "output_dir": str(out), "max_steps": 1,
                           "lineage": {"asset": "audit_rl", "data_version": "v1"}}))
    capsys.readouterr()
    assert main(["audit", str(out)]) == 0
    text = capsys.readouterr().out
    assert "total reward: n=8" in text and "reasons:" in text and "examples:" in text and "ok" in text
    assert main(["audit", "audit_rl", "--json", "--examples", "1"]) == 0  # a stage name: its newest checkpoint
    summary = json.loads(capsys.readouterr().out)
    assert summary["rollouts"] == 8 and summary["path"] == str(out / "rollouts.parquet")
    assert all(len(v) == 1 for r in summary["rewards"].values() for v in r["examples"].values())
    assert main(["audit", str(tiny_model_dir)]) == 2  # no rollouts.parquet
    assert "rollouts.parquet" in capsys.readouterr().err
    assert main(["audit", "no_such_stage"]) == 2
