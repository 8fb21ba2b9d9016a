"""Runs under .venv-vllm/bin/python (tests/trainer/test_logprob_temperature.py starts it): one GRPO
step with vLLM rollouts at a temperature T (fp32 on both sides), once as the trainer runs it and
once with the temperature dropped from the training forward; prints one JSON line of each step's
`rollout_logprob_diff_*` (vLLM's processed log-probs against the training log-probs)."""

from __future__ import annotations

import json
import sys

MARK = "@@RESULT@@"


def main(job: dict) -> dict:
    import pyarrow.parquet as pq
    import torch

    import trainer.grpo as grpo
    from trainer.config import GRPOConfig
    from trainer.stage import run_stage

    torch.set_num_threads(1)
    common = dict(policy=job["policy"], dataset=job["dataset"], rewards=[job["reward"]], max_steps=1,
                  prompts_per_step=2, num_generations=4, max_new_tokens=12, learning_rate=1e-3, seed=3,
                  tensorboard=False, dtype="fp32", reward_cache="off", temperature=job["temperature"],
                  overlong_filtering=False,  # the random tiny model rarely stops: its truncated rollouts train too
                  rollout_engine="vllm", vllm={"dtype": "float32", "max_model_len": 256, "cpu_kvcache_space_gib": 1})
    out: dict = {}
    real = grpo.target_logprobs
    for name in ("tempered", "untempered"):
        if name == "untempered":  # the training forward as before the fix: logits never divided
            grpo.target_logprobs = lambda *a, temperature=1.0, **k: real(*a, **k, temperature=1.0)
        result = run_stage(GRPOConfig(output_dir=f"{job['out']}/{name}", **common))
        (row,) = pq.read_table(result.metrics_path).to_pylist()
        out[name] = {"engine": result.summary["rollout_engine"],
                     **{k: row[k] for k in ("trained_rollouts", "rollout_logprob_diff_mean",
                                            "rollout_logprob_diff_max", "temperature")}}
    grpo.target_logprobs = real
    return out


if __name__ == "__main__":
    print(MARK + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
