"""Eval throughput (rows/s), side by side in one run, on SmolLM2-135M-Instruct:

ours: the eval path (trainer.evaluate.complete_greedy through the `hf` generation engine,
      greedy, every row of the set in one call, batch `--batch-size`) vs
peer: a plain batched `model.generate` (greedy, left-padded batches of `--batch-size`, stop at
      <|im_end|>) on the same model object, the same rendered rows and the same token budget.

Rows are the built-in held-out eval sets (curation.samples: math_eval, instruction_eval,
code_eval, chat_eval by default; `--sets` picks others, swe_eval for long prompts), rendered as
the evals render them (`--mode`). Both sides decode greedily
until the model ends its turn or `--max-new-tokens`; rows/s = rows / wall time of the best of
`--reps` timed calls after one warm-up (the machine is shared: the best call is the least
disturbed), the median is printed too. Target: ours >= 0.8x the peer. The eval cost per
checkpoint of a recipe follows: rows x modes / (rows/s). `--dynamic-cache-too` adds a third
side, taking turns with the others: ours with transformers' DynamicCache instead of the
preallocated KV cache (generation.hf_sampler.KV_CACHES), the sampler before the cache change,
and checks that both give identical completions.

Usage: nice python benchmarks/bench_eval_throughput.py [--rows 64] [--batch-size 16]
       [--max-new-tokens 48] [--mode no_think] [--reps 2] [--threads 2] [--sets math_eval,swe_eval]
       [--dynamic-cache-too]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
SETS = ("math_eval", "instruction_eval", "code_eval", "chat_eval")


def eval_texts(n: int, mode: str, sets: Sequence[str] = SETS) -> list[str]:
    """`n` held-out prompts, taken round-robin from the built-in eval sets, rendered for `mode`
    (SWE rows, which have no prompt column, as the SWE evals prompt them: curation.swe)."""
    from curation.samples import records
    from curation.swe import swe_prompt
    from trainer.evaluate import render_prompts

    pools = [[r["prompt"] if "prompt" in r else swe_prompt(r["issue"], r["code_context"])
              for r in records(name) if isinstance(r, dict)] for name in sets]
    prompts = [pools[i % len(pools)][i // len(pools) % len(pools[i % len(pools)])] for i in range(n)]
    return render_prompts(prompts, mode)


def peer_generate(model, tokenizer, texts: list[str], max_new_tokens: int, batch_size: int) -> list[str]:
    """Plain batched transformers greedy decoding: left padding, stop at the end-of-turn token."""
    import torch

    tokenizer.padding_side = "left"
    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = []
    for i in range(0, len(texts), batch_size):
        batch = tokenizer(texts[i:i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            ids = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=stop,
                                 pad_token_id=pad)
        out += tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--mode", choices=("think", "no_think"), default="no_think")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--model", help="model folder (default: SmolLM2-135M-Instruct from the wheel)")
    parser.add_argument("--sets", default=",".join(SETS), help="eval sets, round-robin (swe_eval: long prompts)")
    parser.add_argument("--dynamic-cache-too", action="store_true",
                        help="also time ours with transformers' DynamicCache (the sampler before the KV cache change)")
    args = parser.parse_args()

    import torch

    from generation.engine import build_engine
    from generation.hf import HFEngine
    from trainer.evaluate import complete_greedy
    from trainer.models import ensure_base_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = args.model or str(ensure_base_model())
    engine = build_engine("hf", model_dir, dtype="float32", batch_size=args.batch_size)
    model, tokenizer = engine.model, engine.tokenizer
    sets = args.sets.split(",")
    texts = eval_texts(args.rows, args.mode, sets)
    sides = {"ours (hf engine)": lambda rows: complete_greedy(engine, rows, args.max_new_tokens)}
    if args.dynamic_cache_too:
        dynamic = HFEngine.from_loaded(model, tokenizer, batch_size=args.batch_size)
        dynamic.sampler.kv_cache = "dynamic"
        sides["ours, DynamicCache"] = lambda rows: complete_greedy(dynamic, rows, args.max_new_tokens)
    sides["peer (model.generate)"] = lambda rows: peer_generate(model, tokenizer, rows, args.max_new_tokens,
                                                                args.batch_size)
    for run in sides.values():  # warm-up
        run(texts[:4])
    times: dict[str, list[float]] = {name: [] for name in sides}
    outputs: dict[str, list[str]] = {}
    for _ in range(args.reps):
        for name, run in sides.items():
            t0 = time.perf_counter()
            outputs[name] = run(texts)
            times[name].append(time.perf_counter() - t0)
    best = {name: args.rows / min(t) for name, t in times.items()}
    same = sum(a.strip() == b.strip() for a, b in zip(outputs["ours (hf engine)"], outputs["peer (model.generate)"]))
    ours, peer = best["ours (hf engine)"], best["peer (model.generate)"]
    print(f"settings: SmolLM2-135M-Instruct fp32, {args.rows} rows ({', '.join(sets)}), mode {args.mode}, greedy, "
          f"max_new_tokens {args.max_new_tokens}, batch {args.batch_size}, torch threads {torch.get_num_threads()}, "
          f"best of {args.reps}")
    for name, t in times.items():
        print(f"  {name:<24} {best[name]:6.2f} rows/s (best {min(t):.1f} s, median {statistics.median(t):.1f} s)")
    print(f"  identical completions: {same}/{args.rows}")
    print(f"ratio ours/peer: {ours / peer:.2f}x (target >= 0.8x)")
    extra = {}
    if args.dynamic_cache_too:
        before = best["ours, DynamicCache"]
        extra = {"dynamic_cache_rows_per_s": before, "speedup_over_dynamic_cache": ours / before,
                 "identical_to_dynamic_cache": outputs["ours, DynamicCache"] == outputs["ours (hf engine)"]}
        print(f"preallocated / DynamicCache: {ours / before:.2f}x; identical completions: "
              f"{extra['identical_to_dynamic_cache']}")
    print(json.dumps({"ours_rows_per_s": ours, "peer_rows_per_s": peer, "ratio": ours / peer, "rows": args.rows,
                      "identical": same, "seconds_per_100_rows_per_mode": 100 / ours, **extra}))


if __name__ == "__main__":
    main()
