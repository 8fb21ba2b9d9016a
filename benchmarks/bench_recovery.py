"""Recovery after forgetting: MOPD vs GRPO for the same number of steps on the same prompts.

Cascade 2 (arXiv 2603.19220) reports that multi-domain on-policy distillation recovers what
an RL stage cost an earlier domain in a few dozen steps, faster than more GRPO. This benchmark
replays that at toy scale with our trainers (trainer.mopd, trainer.grpo), side by side in one run:

1. **Start** from the policy (`--model`: SmolLM2-135M-Instruct by default, `tiny` for a smoke run).
2. **Degrade:** train on domain B (`--degrade`) until domain A (`--victim`) has dropped; this
   is the checkpoint "after a stage that lost ground on an earlier domain". `--degrade-method
   grpo` runs GRPO on B's prompts with B's verifier; `sft` (the default, see below) runs a few
   SFT steps on B's reference answers at a high learning rate.
3. **Recover** from it, `--recover-steps` steps each, on the same mixed A+B prompts (same
   prompts per step, generations and budget):
   - MOPD: teachers are the start checkpoint for A (it was good at A) and the degraded
     checkpoint for B (it is the best at B);
   - GRPO: the per-domain verifiers (rewards.registry) as rewards.
4. **Score** A and B on held-out prompts after every checkpoint (greedy, /no_think) with
   trainer.stats 95% intervals (Wilson for pass rates, bootstrap for continuous scores), and
   paired tests on rows aligned by row_id (McNemar mid-p / paired bootstrap): did A drop after
   degrading (degraded vs start), and did each recovery move A and B (vs degraded). Each
   run is timed (wall seconds).

Why these defaults (victim mcqa, degrade structured_output by SFT): measured on
SmolLM2-135M-Instruct on CPU (`--probe`; 32 held-out rows greedy, 8 prompts x 4 samples at
temperature 1, 64 new tokens): mcqa greedy 4/32 (0.125), structured_output 0/32, and neither
had a sampled group with reward variance (0/8 each; tool_call, math and ifeval could not be
probed on the shared 2-core machine in time). So GRPO on B has no gradient and changes nothing
(the degraded checkpoint equalled the start), and the one victim with a non-zero baseline is
mcqa. An SFT stage on B's reference answers (JSON objects) is an honest "stage that lost ground
on an earlier domain": a fine-tune that narrows the output format. Recovery is always MOPD vs
GRPO, same steps, prompts, generations and learning rate. Measured 2026-12-06 on the shared
2-core CPU (/work/notes/recovery.json, recovery_ifeval.json): 8 SFT steps at lr 1e-4 took B from
0 to 48/48 but A's drop was not significant (mcqa 4/48 -> 1/48, p = 0.22; ifeval 10/48 -> 9/48),
so from SmolLM2 itself the benchmark does not show recovery. From a checkpoint that is good at
tool calls it does: the multi-domain RL checkpoint of recipes/cascade2_proof.yaml (tool_call 64/64)
with `--victim tool_call` fell to 0/64 after the 8 SFT steps on JSON answers (p = 5e-20); 6 MOPD
steps brought it back to 64/64 (p = 5e-20) while 6 GRPO steps left it at 0/64 (no sampled group
had reward variance: no gradient), 2026-12-07, docs/results.md has the command and the table.

`--probe` instead prints, per candidate domain, the greedy pass rate and how many sampled
groups (temperature 1) have reward variance, the facts that pick a victim (a non-trivial
baseline) and a GRPO degrade domain (variance). Settings are flags so a GPU runs larger ones.
The table and a JSON record (settings, per-row scores, cells, paired tests, times, machine) are
printed; `--out` also writes the JSON.

Usage: nice -n 19 python benchmarks/bench_recovery.py [--model smollm2|tiny|PATH] [--probe]
       [--victim mcqa] [--degrade structured_output] [--degrade-method sft|grpo] [--degrade-steps 8]
       [--recover-steps 6] [--eval-n 48] [--workdir DIR] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from recovery_lib import (
    DOMAINS,
    cell_of,
    domain_rows,
    paired,
    probe,
    reference_response,
    score_checkpoint,
    write_prompts,
)


def write_sft(rows: list[dict], path: Path) -> Path:
    """SFT rows (SFT_SCHEMA) answering each prompt with its reference response."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.chat import prompt_messages, render_messages
    from curation.schemas import SFT_SCHEMA
    from spec.train import DEFAULT_SYSTEM

    out = []
    for r in rows:
        messages = prompt_messages(r["prompt"], "no_think", DEFAULT_SYSTEM, r.get("tools"))
        messages.append({"role": "assistant", "content": reference_response(r)})
        out.append({"row_id": r["row_id"], "source": r["source"], "domain": r["domain"], "mode": "no_think",
                    "messages": json.dumps(messages), "text": render_messages(messages)})
    pq.write_table(pa.Table.from_pylist(out, schema=SFT_SCHEMA), path)
    return path


def report(results: dict, a: str, b: str, times: dict, args: argparse.Namespace) -> dict:
    """Print the table (cells and paired tests) and return the summary part of the record."""
    cells = {name: {d: cell_of(r[d]) for d in (a, b)} for name, r in results.items()}
    tests = {"degraded_vs_start": {d: paired(results["start"][d], results["degraded"][d]) for d in (a, b)}}
    for name in ("mopd", "grpo"):
        if name in results:
            tests[f"{name}_vs_degraded"] = {d: paired(results["degraded"][d], results[name][d]) for d in (a, b)}
    if "mopd" in results and "grpo" in results:
        tests["mopd_vs_grpo"] = {d: paired(results["grpo"][d], results["mopd"][d]) for d in (a, b)}

    def fmt(c: dict) -> str:
        return f"{c['rate']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}] ({c['pass']}/{c['n']})"

    def fmt_t(t: dict) -> str:
        return f"{t['diff']:+.3f} [{t['lo']:+.3f}, {t['hi']:+.3f}] p={t['p_value']:.3g}"

    print(f"\nRecovery benchmark: A = {a} (victim, the domain lost), B = {b} (degraded by "
          f"{args.degrade_method} for {args.degrade_steps} steps at lr {args.degrade_lr:g})")
    print(f"{'checkpoint':<10} {'A score [95% CI] (pass/n)':<32} {'B score [95% CI] (pass/n)':<32} wall s")
    for name, c in cells.items():
        secs = times.get(f"{name}_s")
        print(f"{name:<10} {fmt(c[a]):<32} {fmt(c[b]):<32} {'' if secs is None else f'{secs:.0f}'}")
    print(f"\npaired tests on the same held-out rows (diff = new - old, 95% CI, two-sided "
          f"{next(iter(tests['degraded_vs_start'].values()))['test']} p):")
    for name, t in tests.items():
        print(f"  {name:<18} A {fmt_t(t[a]):<34} B {fmt_t(t[b])}")
    if "mopd_s" in times and "grpo_s" in times:
        print(f"wall time: MOPD {times['mopd_s']:.0f} s, GRPO {times['grpo_s']:.0f} s ({args.recover_steps} steps each), "
              f"MOPD/GRPO {times['mopd_s'] / max(times['grpo_s'], 1e-9):.2f}")
    return {"cells": cells, "paired": tests}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="smollm2, tiny, or a HF model folder")
    ap.add_argument("--victim", default="mcqa", choices=sorted(DOMAINS), help="domain A, the one that must drop")
    ap.add_argument("--degrade", default="structured_output", choices=sorted(DOMAINS), help="domain B, the stage that costs A")
    ap.add_argument("--degrade-method", default="sft", choices=["sft", "grpo"])
    ap.add_argument("--degrade-steps", type=int, default=8)
    ap.add_argument("--degrade-lr", type=float, default=1e-4)
    ap.add_argument("--degraded", default=None, help="reuse this degraded checkpoint (skips the degrade run)")
    ap.add_argument("--recover-steps", type=int, default=6)
    ap.add_argument("--mopd-lr", type=float, default=1e-4)
    ap.add_argument("--grpo-lr", type=float, default=1e-4)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--num-generations", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--train-prompts", type=int, default=40, help="training prompts per domain")
    ap.add_argument("--eval-n", type=int, default=48, help="held-out prompts per domain")
    ap.add_argument("--only", default="mopd,grpo", help="recovery runs to do (comma list of mopd, grpo)")
    ap.add_argument("--probe", action="store_true", help="only probe the candidate domains on --model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="keep checkpoints here (default: a temp folder)")
    ap.add_argument("--out", default=None, help="also write the JSON record here")
    args = ap.parse_args(argv)
    if args.victim == args.degrade:
        ap.error("--victim and --degrade must differ")

    import torch

    from trainer.config import GRPOConfig, SFTConfig
    from trainer.models import ensure_base_model, make_tiny_model
    from trainer.mopd import MOPDConfig
    from trainer.stage import run_stage

    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_recovery_"))
    work.mkdir(parents=True, exist_ok=True)
    start = {"smollm2": ensure_base_model, "tiny": lambda: make_tiny_model(work / "tiny", seed=0)}.get(
        args.model, lambda: Path(args.model))()  # before CASCADE_HOME moves: reuse the converted base model
    os.environ.setdefault("CASCADE_HOME", str(work / "home"))
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(),
               "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    if args.probe:
        t0 = time.perf_counter()
        found = probe(start, sorted(DOMAINS), 32, 8, args.num_generations, args.max_new_tokens)
        for d, r in found.items():
            g = r["greedy"]
            print(f"{d:<18} greedy {g['rate']:.3f} [{g['ci95'][0]:.3f}, {g['ci95'][1]:.3f}] ({g['pass']}/{g['n']})  "
                  f"sampled mean reward {r['sampled_mean_reward']:.3f}  groups with variance {r['groups_with_variance']}")
        record = {"settings": vars(args), "start": str(start), "probe": found, "machine": machine,
                  "probe_s": time.perf_counter() - t0}
        print(json.dumps(record, indent=1))
        if args.out:
            Path(args.out).write_text(json.dumps(record, indent=1))
        return 0

    a, b = args.victim, args.degrade
    train_a, held_a = domain_rows(a, args.train_prompts, args.eval_n)
    train_b, held_b = domain_rows(b, args.train_prompts, args.eval_n)
    held = {a: held_a, b: held_b}
    mixed = write_prompts(train_a + train_b, work / "mixed.parquet")
    common = {"prompts_per_step": args.prompts_per_step, "num_generations": args.num_generations,
              "max_new_tokens": args.max_new_tokens, "seed": args.seed, "tensorboard": False, "reward_cache": "off",
              "mode": "no_think", "temperature": 1.0, "torch_threads": args.threads}

    results: dict[str, dict] = {}
    times: dict[str, float] = {}

    def save(note: str) -> None:  # a partial record after every phase, so a cut-off run leaves its numbers
        if args.out:
            Path(args.out).write_text(json.dumps({"settings": vars(args), "start": str(start), "progress": note,
                                                  "per_row": results, "times_s": times, "machine": machine}))

    print(f"[recovery] scoring the start checkpoint {start}", file=sys.stderr, flush=True)
    results["start"] = score_checkpoint(start, held, args.max_new_tokens)
    save("start scored")
    t0 = time.perf_counter()
    if args.degraded:
        degraded = Path(args.degraded)
    elif args.degrade_method == "grpo":
        degraded = run_stage(GRPOConfig(
            policy=str(start), dataset=str(write_prompts(train_b, work / "degrade.parquet")),
            output_dir=str(work / "degraded"), rewards=[DOMAINS[b].reward], max_steps=args.degrade_steps,
            learning_rate=args.degrade_lr, **common)).output_dir
    else:
        degraded = run_stage(SFTConfig(
            policy=str(start), dataset=str(write_sft(train_b, work / "degrade_sft.parquet")),
            output_dir=str(work / "degraded"), max_steps=args.degrade_steps, learning_rate=args.degrade_lr,
            batch_size=8, packing=False, max_length=512, lr_schedule="constant", warmup_ratio=0.0,
            seed=args.seed, tensorboard=False, torch_threads=args.threads)).output_dir
    times["degraded_s"] = time.perf_counter() - t0
    results["degraded"] = score_checkpoint(degraded, held, args.max_new_tokens)
    save("degraded scored")
    runs = [r.strip() for r in args.only.split(",") if r.strip()]
    if "mopd" in runs:
        t0 = time.perf_counter()
        mopd = run_stage(MOPDConfig(policy=str(degraded), dataset=str(mixed), output_dir=str(work / "mopd"),
                                   teachers={a: str(start), b: str(degraded)},
                                   rewards=[DOMAINS[a].reward, DOMAINS[b].reward],
                                   max_steps=args.recover_steps, learning_rate=args.mopd_lr, **common)).output_dir
        times["mopd_s"] = time.perf_counter() - t0
        results["mopd"] = score_checkpoint(mopd, held, args.max_new_tokens)
        save("mopd scored")
    if "grpo" in runs:
        t0 = time.perf_counter()
        grpo = run_stage(GRPOConfig(policy=str(degraded), dataset=str(mixed), output_dir=str(work / "grpo"),
                                   rewards=[DOMAINS[a].reward, DOMAINS[b].reward], max_steps=args.recover_steps,
                                   learning_rate=args.grpo_lr, **common)).output_dir
        times["grpo_s"] = time.perf_counter() - t0
        results["grpo"] = score_checkpoint(grpo, held, args.max_new_tokens)

    summary = report(results, a, b, times, args)
    record = {"settings": vars(args), "start": str(start), "degraded": str(degraded), **summary,
              "per_row": results, "times_s": times, "machine": machine}
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "per_row"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
