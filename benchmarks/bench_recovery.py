"""Recovery after forgetting: MOPD vs GRPO for the same number of steps on the same prompts.

Cascade 2 (arXiv 2603.19220) reports that multi-domain on-policy distillation recovers what an
RL stage cost an earlier domain in a few dozen steps, faster than more GRPO. This benchmark
replays that at toy scale with our trainers (trainer.mopd, trainer.grpo), side by side in one run:

1. **Start** from the policy (`--model`: SmolLM2-135M-Instruct by default, `tiny` for a smoke run).
2. **Degrade:** GRPO on domain B (structured output: JSON answers) at a high learning rate for
   `--degrade-steps` steps, until domain A (multiple-choice QA: a declared letter) has dropped;
   this is the checkpoint "after a stage that lost ground on an earlier domain".
3. **Recover** from it, `--recover-steps` steps each, on the same mixed A+B prompts (same
   prompts per step, generations and budget):
   - MOPD: teachers are the start checkpoint for A (it was good at A) and the degraded
     checkpoint for B (it is the best at B);
   - GRPO: the per-domain verifiers (rewards.multi_domain) as rewards.
4. **Score** A and B on held-out prompts after every checkpoint (greedy, /no_think), as pass
   rates with 95% Wilson intervals, and time each recovery run (wall seconds).

Settings are flags so a GPU runs larger ones (`--model`, `--eval-n`, `--recover-steps`,
`--prompts-per-step`, `--num-generations`, `--max-new-tokens`). The table and a JSON record
(settings, scores, intervals, times, machine) are printed; `--out` also writes the JSON.

Usage: nice -n 19 python benchmarks/bench_recovery.py [--model smollm2|tiny|PATH] [--degrade-steps 6]
       [--recover-steps 6] [--eval-n 48] [--out recovery.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

A, B = "mcqa", "structured_output"
GENERATORS = {A: "mcqa_rl", B: "structured_output_rl"}
REWARDS = {A: "mcqa", B: "structured_output"}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a pass rate k/n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def prompt_rows(n_train: int, n_eval: int) -> tuple[list[dict], dict[str, list[dict]]]:
    """(training rows of both domains, held-out rows per domain): RL_SCHEMA dicts, no text shared."""
    from curation.samples import records

    train, held = [], {}
    for domain, gen in GENERATORS.items():
        rows = [r for r in records(gen, seed=1234) if isinstance(r, dict)]
        seen = {r["prompt"] for r in rows[:n_train]}
        extra = [r for r in records(gen, seed=4321) if isinstance(r, dict) and r["prompt"] not in seen]
        train += [{"row_id": f"{domain}-{i}", "source": gen, "domain": domain, "mode": "no_think", **r}
                  for i, r in enumerate(rows[:n_train])]
        held[domain] = [{"row_id": f"eval-{domain}-{i}", "source": gen, "domain": domain, "mode": "no_think", **r}
                        for i, r in enumerate(extra[:n_eval])]
    return train, held


def write_prompts(rows: list[dict], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.schemas import RL_SCHEMA

    pq.write_table(pa.Table.from_pylist(rows, schema=RL_SCHEMA), path)
    return path


def evaluate(model_dir: Path, held: dict[str, list[dict]], max_new_tokens: int) -> dict[str, dict]:
    """Greedy /no_think pass rate of each domain's held-out rows under its verifier."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curation.chat import render_prompt
    from generation.hf_sampler import PrefixSharedSampler
    from rewards.registry import get_reward
    from spec.train import DEFAULT_SYSTEM

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    sampler = PrefixSharedSampler(model, tok, batch_size=16)
    out = {}
    for domain, rows in held.items():
        ids = [tok(render_prompt(r["prompt"], "no_think", DEFAULT_SYSTEM, r.get("tools")),
                   add_special_tokens=False)["input_ids"] for r in rows]
        groups = sampler.sample(ids, 1, max_new_tokens, temperature=0.0, seed=0)
        texts = [tok.decode(g[0].token_ids, skip_special_tokens=True) for g in groups]
        columns = {k: [r.get(k) for r in rows] for k in ("answer", "json_schema", "domain")}
        scores = [s or 0.0 for s in get_reward(REWARDS[domain])([r["prompt"] for r in rows], texts, **columns)]
        k = int(sum(1 for s in scores if s >= 1.0))
        low, high = wilson(k, len(rows))
        out[domain] = {"pass": k, "n": len(rows), "rate": k / max(1, len(rows)), "ci95": [low, high]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="smollm2, tiny, or a HF model folder")
    ap.add_argument("--degrade-steps", type=int, default=6)
    ap.add_argument("--degrade-lr", type=float, default=1e-4)
    ap.add_argument("--recover-steps", type=int, default=6)
    ap.add_argument("--mopd-lr", type=float, default=2e-5)
    ap.add_argument("--grpo-lr", type=float, default=2e-5)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--train-prompts", type=int, default=40, help="training prompts per domain")
    ap.add_argument("--eval-n", type=int, default=48, help="held-out prompts per domain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="keep checkpoints here (default: a temp folder)")
    ap.add_argument("--out", default=None, help="also write the JSON record here")
    args = ap.parse_args(argv)

    import torch

    from trainer.config import GRPOConfig
    from trainer.models import ensure_base_model, make_tiny_model
    from trainer.mopd import MOPDConfig, run_mopd
    from trainer.stage import run_grpo

    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_recovery_"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CASCADE_HOME", str(work / "home"))
    if args.model == "smollm2":
        start = ensure_base_model()
    elif args.model == "tiny":
        start = make_tiny_model(work / "tiny", seed=0)
    else:
        start = Path(args.model)
    train, held = prompt_rows(args.train_prompts, args.eval_n)
    b_only = write_prompts([r for r in train if r["domain"] == B], work / "degrade.parquet")
    mixed = write_prompts(train, work / "mixed.parquet")
    common = dict(prompts_per_step=args.prompts_per_step, num_generations=args.num_generations,
                  max_new_tokens=args.max_new_tokens, seed=args.seed, tensorboard=False, reward_cache="off",
                  mode="no_think", temperature=1.0, torch_threads=args.threads)

    results, times = {}, {}
    print(f"[recovery] scoring the start checkpoint {start}", file=sys.stderr, flush=True)
    results["start"] = evaluate(start, held, args.max_new_tokens)
    t0 = time.perf_counter()
    degraded = run_grpo(GRPOConfig(policy=str(start), dataset=str(b_only), output_dir=str(work / "degraded"),
                                   rewards=[REWARDS[B]], max_steps=args.degrade_steps, learning_rate=args.degrade_lr,
                                   **common)).output_dir
    times["degrade_s"] = time.perf_counter() - t0
    results["degraded"] = evaluate(degraded, held, args.max_new_tokens)
    t0 = time.perf_counter()
    mopd = run_mopd(MOPDConfig(policy=str(degraded), dataset=str(mixed), output_dir=str(work / "mopd"),
                               teachers={A: str(start), B: str(degraded)}, rewards=[REWARDS[A], REWARDS[B]],
                               max_steps=args.recover_steps, learning_rate=args.mopd_lr, **common)).output_dir
    times["mopd_s"] = time.perf_counter() - t0
    results["mopd"] = evaluate(mopd, held, args.max_new_tokens)
    t0 = time.perf_counter()
    grpo = run_grpo(GRPOConfig(policy=str(degraded), dataset=str(mixed), output_dir=str(work / "grpo"),
                               rewards=[REWARDS[A], REWARDS[B]], max_steps=args.recover_steps,
                               learning_rate=args.grpo_lr, **common)).output_dir
    times["grpo_s"] = time.perf_counter() - t0
    results["grpo"] = evaluate(grpo, held, args.max_new_tokens)

    print(f"\nRecovery benchmark: A = {A} (the domain lost), B = {B} (the degrading RL domain)")
    print(f"{'checkpoint':<10} {'A pass rate [95% CI]':<28} {'B pass rate [95% CI]':<28}")
    for name, r in results.items():
        cells = [f"{r[d]['rate']:.3f} [{r[d]['ci95'][0]:.3f}, {r[d]['ci95'][1]:.3f}] ({r[d]['pass']}/{r[d]['n']})"
                 for d in (A, B)]
        print(f"{name:<10} {cells[0]:<28} {cells[1]:<28}")
    print(f"wall time: degrade {times['degrade_s']:.1f} s, MOPD {times['mopd_s']:.1f} s, "
          f"GRPO {times['grpo_s']:.1f} s ({args.recover_steps} steps each); "
          f"MOPD/GRPO time ratio {times['mopd_s'] / max(times['grpo_s'], 1e-9):.2f}")
    record = {"settings": vars(args), "start": str(start), "scores": results, "times_s": times,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}}
    print(json.dumps(record, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
