"""GRPO rollouts on worker processes (rollout_workers, generation.hf_workers): the trained weights
reach the workers after every update and the workers stop with the stage."""

from __future__ import annotations

import os

def test_grpo_rollouts_on_two_workers(grpo_kwargs):
    import pyarrow.parquet as pq

    from trainer.config import GRPOConfig
    from trainer.stage import run_stage

    result = run_stage(GRPOConfig(**{**grpo_kwargs, "rollout_workers": 2, "max_steps": 3}))
    summary = result.lineage_path.read_text()
    assert '"rollout_engine": "hf_workers"' in summary
    rows = pq.read_table(result.metrics_path).to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[0]["grad_norm"] > 0
    # The pushed weights are the trained ones: the training forward sits on the sampler's log-probs.
    diffs = [r["rollout_logprob_diff_mean"] for r in rows if r["rollout_logprob_diff_mean"] == r["rollout_logprob_diff_mean"]]
    assert diffs and max(diffs) < 1e-4, diffs  # NaN: a step with no trained token
    children = [p for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == os.getpid()]
    assert not [p for p in children if "generation.hf_workers" in _cmdline(int(p))]


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().split(") ", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return ""
