"""GPU check: one GRPO step on SmolLM2-135M with colocated vLLM rollouts; prints rollout tokens/s.

Needs a CUDA GPU and the [gpu] extra (vllm). Without them it stops at once with exit code 2 and
says what is missing, instead of failing deep inside vLLM. Run it on a GPU machine with:

    pip install -e '.[gpu]'   # vllm brings its own CUDA torch
    python benchmarks/gpu_check.py [--steps 1] [--prompts 8] [--generations 8] [--max-new-tokens 256]

The engine-level checks (vLLM greedy tokens equal HF greedy tokens; pushed weights change what
vLLM samples) are tests/trainer/test_vllm_rollout.py, which runs on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def require_gpu() -> str | None:
    """Why this machine cannot run the check (None when it can)."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU visible (torch.cuda.is_available() is False)"
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed: pip install -e '.[gpu]'"
    return None


def write_prompts(path: Path, n: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.schemas import RL_SCHEMA

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"row_id": f"g{i}", "source": "gpu_check", "domain": "math", "mode": "think",
                     "prompt": f"What is {a} plus {b}? Put the final answer in \\boxed{{}}.", "answer": str(a + b)})
    pq.write_table(pa.Table.from_pylist(rows, schema=RL_SCHEMA), path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="one GRPO step with vLLM rollouts on a GPU")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--out", default=os.path.join(os.environ.get("CASCADE_HOME", ".cascade"), "gpu_check"))
    args = ap.parse_args(argv)
    problem = require_gpu()
    if problem:
        print(f"gpu_check: cannot run: {problem}", file=sys.stderr)
        return 2

    import pyarrow.parquet as pq
    import torch

    from trainer.config import GRPOConfig
    from trainer.models import ensure_base_model
    from trainer.stage import run_grpo

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"device: {torch.cuda.get_device_name(0)}", flush=True)
    policy = ensure_base_model()
    write_prompts(out / "prompts.parquet", args.prompts * args.steps, seed=0)
    config = GRPOConfig(
        policy=str(policy), dataset=str(out / "prompts.parquet"),
        output_dir=str(out / f"grpo_{time.strftime('%Y%m%d-%H%M%S')}"), rewards=["math"],
        max_steps=args.steps, prompts_per_step=args.prompts, num_generations=args.generations,
        max_new_tokens=args.max_new_tokens, learning_rate=2e-6, temperature=1.0, rollout_engine="vllm",
        vllm={"gpu_memory_utilization": args.gpu_memory_utilization}, deterministic=False, tensorboard=False)
    t0 = time.perf_counter()
    result = run_grpo(config)
    wall = time.perf_counter() - t0
    rows = pq.read_table(result.metrics_path).to_pylist()
    for r in rows:
        tokens = r["completion_len_mean"] * args.prompts * args.generations
        print(f"step {r['step']}: {tokens:.0f} rollout tokens in {r['time_generation_s']:.2f} s -> "
              f"{tokens / r['time_generation_s']:.0f} rollout tokens/s; step {r['time_step_s']:.2f} s, "
              f"reward {r['reward_mean']:.3f}, truncated {r['truncated_frac']:.2f}", flush=True)
    report = {"device": torch.cuda.get_device_name(0), "wall_s": wall, "metrics": rows,
              "output_dir": str(result.output_dir)}
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"ok: checkpoint {result.output_dir}; report {out / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
