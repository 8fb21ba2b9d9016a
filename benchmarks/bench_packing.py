"""Packed SFT micro-batch: dense L x L mask (the old layout) vs varlen segments (trainer.attention).

One packed row of L tokens (2K, 4K, 8K, 16K) made of segments of realistic lengths (uniform in
[--min-seg, --max-seg], the last one cut to fill L exactly), targets on the last --target-frac of
each segment. Both settings run SmolLM2-135M-Instruct (fp32 weights) through trainer.batching's
target_logprobs, forward + backward of the mean target NLL, under the autocast dtype SFT uses
here (`dtype: auto`: bf16 where the CPU has it natively, else fp32; --dtype overrides):
- dense:  the layout trainer.batching built before varlen packing: a [1, 1, L, L] boolean
  block-diagonal causal mask, model attention "sdpa".
- varlen: `build_batch` today: position_ids + segment boundaries, "cascade_varlen" attention.
Each (setting, L) runs in a fresh process: peak memory = peak RSS minus the RSS after loading the
model; step time = median of --reps steps after --warmup warm-up steps, as process CPU seconds
with --threads 1 by default (wall time on a shared machine swings several-fold; the wall times are
printed too). Dense is skipped above
--dense-max tokens (its attention is O(L^2) time on a CPU), and any setting whose peak, projected
linearly from its previous length, would not fit in the available memory; reasons are printed.
--checkpointing (activation checkpointing per decoder layer) makes 16K fit in ~24 GB: stored
activations then no longer hide what the attention layout itself costs.

Usage: nice python benchmarks/bench_packing.py [--lengths 2048 4096 8192 16384] [--reps 3] [--checkpointing]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_segments(length: int, lo: int, hi: int, frac: float, vocab: int, seed: int) -> list[tuple[list[int], list[bool]]]:
    rng = random.Random(seed)
    segs, used = [], 0
    while used < length:
        n = min(rng.randint(lo, hi), length - used)
        first_target = n - max(1, int(n * frac))
        segs.append(([rng.randrange(3, vocab) for _ in range(n)], [i >= first_target for i in range(n)]))
        used += n
    return segs


def available_mb() -> float:
    with open("/proc/meminfo") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("MemAvailable")) / 1024


def projected_mb(results: dict, mode: str, length: int) -> float:
    """Peak memory of (mode, length) extrapolated linearly from the longest smaller length run."""
    done = [n for m, n in results if m == mode and n < length]
    if not done:
        return 0.0
    return results[(mode, max(done))]["peak_rss_mb"] * length / max(done)


def dense_batch(segs: list[tuple[list[int], list[bool]]]) -> dict:
    """The same row with the old dense block-diagonal causal mask instead of boundaries."""
    import torch

    from trainer.batching import build_batch

    batch = build_batch([segs])
    seg_id = torch.repeat_interleave(torch.arange(len(segs)), torch.tensor([len(ids) for ids, _ in segs]))
    L = seg_id.numel()
    allowed = (seg_id[:, None] == seg_id[None, :]) & torch.ones((L, L), dtype=torch.bool).tril()
    del batch["segments"]
    batch["attention_mask"] = allowed[None, None]
    return batch


def worker(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.backend_api import Backend, resolve_dtype
    from trainer.batching import build_batch, target_logprobs
    from trainer.models import ensure_base_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(ensure_base_model(), dtype=torch.float32).train()
    if args.checkpointing:
        model.gradient_checkpointing_enable()
    backend = Backend()
    backend.model, backend.device = model, torch.device("cpu")
    backend.autocast_dtype = resolve_dtype(args.dtype, backend.device)
    segs = make_segments(args.worker_length, args.min_seg, args.max_seg, args.target_frac, model.config.vocab_size,
                         args.seed)
    base_rss = rss_mb()
    times, cpu = [], []
    for i in range(args.reps + args.warmup):
        batch = dense_batch(segs) if args.worker == "dense" else build_batch([segs])  # built per step, as SFT does
        t0, c0 = time.perf_counter(), time.process_time()
        logp, _ = target_logprobs(backend, batch)
        (-logp.mean()).backward()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        model.zero_grad(set_to_none=False)
        del batch, logp
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mode": args.worker, "length": args.worker_length, "segments": len(segs),
            "targets": sum(sum(m[1:]) for _, m in segs), "step_s": statistics.median(times), "times_s": times,
            "cpu_s": statistics.median(cpu), "cpu_times_s": cpu,
            "peak_rss_mb": peak, "peak_over_model_mb": peak - base_rss,
            "dtype": str(backend.autocast_dtype or torch.float32), "threads": torch.get_num_threads(),
            "attn": model.config._attn_implementation}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="packed SFT step: dense mask vs varlen segments")
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (0: torch's default)")
    ap.add_argument("--checkpointing", action="store_true", help="activation checkpointing per decoder layer")
    ap.add_argument("--min-seg", type=int, default=256)
    ap.add_argument("--max-seg", type=int, default=1024)
    ap.add_argument("--target-frac", type=float, default=0.5)
    ap.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"])
    ap.add_argument("--dense-max", type=int, default=8192, help="skip dense above this many tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=1800, help="per-process limit, seconds")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--worker", choices=["dense", "varlen"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-length", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return 0
    import torch
    import transformers

    print(f"settings: SmolLM2-135M-Instruct fp32 weights, autocast dtype={args.dtype}, one packed row, segments "
          f"uniform in [{args.min_seg}, {args.max_seg}] tokens, targets = last {args.target_frac:.0%} of each, "
          f"forward+backward of mean target NLL, median of {args.reps} steps after {args.warmup} warm-up, fresh process each, "
          f"{args.threads or 'default'} torch thread(s); "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, activation checkpointing {'on' if args.checkpointing else 'off'}", flush=True)
    results: dict[tuple[str, int], dict] = {}
    for length in args.lengths:
        for mode in ("dense", "varlen"):
            if mode == "dense" and length > args.dense_max:
                print(f"  dense L={length}: skipped (--dense-max {args.dense_max}: the L x L mask is "
                      f"{length * length / 2**20:.0f} MiB and its attention O(L^2) time on this CPU)", flush=True)
                continue
            need = projected_mb(results, mode, length)
            if need > available_mb() * 0.9:
                print(f"  {mode} L={length}: skipped (projected peak {need:.0f} MB, linear in L from the last "
                      f"length, exceeds 90% of the {available_mb():.0f} MB available)", flush=True)
                continue
            cmd = [sys.executable, __file__, "--worker", mode, "--worker-length", str(length), "--reps", str(args.reps),
                   "--min-seg", str(args.min_seg), "--max-seg", str(args.max_seg), "--target-frac",
                   str(args.target_frac), "--dtype", args.dtype, "--seed", str(args.seed),
                   "--warmup", str(args.warmup), "--threads", str(args.threads)] + (["--checkpointing"] if args.checkpointing else [])
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout, check=False)
            except subprocess.TimeoutExpired:
                print(f"  {mode} L={length}: over the {args.timeout}s limit", flush=True)
                continue
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not lines:
                print(f"  {mode} L={length}: failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}", flush=True)
                continue
            r = results[(mode, length)] = json.loads(lines[-1][7:])
            print(f"  {mode:6s} L={length:5d}: {r['segments']} segments, CPU {r['cpu_s']:.2f}s "
                  f"{[round(t, 2) for t in r['cpu_times_s']]}, wall {[round(t, 2) for t in r['times_s']]}, "
                  f"peak +{r['peak_over_model_mb']:.0f} MB "
                  f"(dtype {r['dtype']}, {r['threads']} threads, attn {r['attn']})", flush=True)
    print("\nstep = CPU seconds of forward+backward (median); peak = peak RSS over the loaded model")
    print("| tokens | segments | dense step s | varlen step s | speedup | dense peak MB | varlen peak MB | memory ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for length in args.lengths:
        d, v = results.get(("dense", length)), results.get(("varlen", length))
        if v is None:
            continue
        fmt = lambda r, key, spec: format(r[key], spec) if r else "-"
        speed = f"{d['cpu_s'] / v['cpu_s']:.2f}x" if d else "-"
        mem = f"{d['peak_over_model_mb'] / v['peak_over_model_mb']:.2f}x" if d else "-"
        print(f"| {length} | {v['segments']} | {fmt(d, 'cpu_s', '.2f')} | {v['cpu_s']:.2f} | {speed} | "
              f"{fmt(d, 'peak_over_model_mb', '.0f')} | {v['peak_over_model_mb']:.0f} | {mem} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps([{"setting": m, **r} for (m, _), r in results.items()], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
