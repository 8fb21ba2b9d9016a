"""Generation cache: a fully cached rerun of 10,000 rows, and memory that does not grow with prompts.

    .venv/bin/python benchmarks/bench_generation_cache.py [--rows 10000] [--samples 2] [--modes think,no_think]

1. Fill: `generate_rows` over N math rows through the deterministic fake engine
   (tests/generation/fake_engine.py), every batch committed (fsync) to a fresh cache.
2. Fully cached rerun, timed as a whole (open the cache, render, key, look up, stream every
   record): a new engine must see zero calls. Also timed with rejection sampling on top
   (format checks + canonical rows + content hash; no verifier), i.e. a re-filter run.
3. The design alternative, measured on the same samples: append-only JSONL segment with an
   in-memory index rebuilt by scanning on open (open + lookup time, index memory).
4. Peak memory of the cached streaming rerun (tracemalloc, and ru_maxrss) in a fresh process
   for 1k and 10k prompts: the stream holds one batch, so the peak must stay flat.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "generation")]

from fake_engine import FakeEngine  # noqa: E402

from generation.cache import GenerationCache, KeySpace  # noqa: E402
from generation.engine import Sampling  # noqa: E402
from generation.filters import rejection_sample  # noqa: E402
from generation.pipeline import GenerationStats, generate_rows  # noqa: E402

SAMPLING = Sampling(max_new_tokens=2048, temperature=1.0, seed=0)


def rows(n: int):
    """N math rows, lazily (a generator: the benchmark never holds the input)."""
    for i in range(n):
        yield {"row_id": f"r{i}", "source": "bench", "prompt": f"Problem {i}: what is {i} + {3 * i}?", "answer": str(4 * i)}


def responder(chars: int):
    filler = "step " * (chars // 5)

    def respond(prompt: str, i: int, seed: int) -> str:
        think = prompt.rstrip().endswith("/think<|im_end|>\n<|im_start|>assistant")
        body = f"{filler}\\boxed{{{len(prompt) + i}}}"
        return f"<think>{filler}</think>{body}" if think else body

    return respond


def run(cache_dir: Path, n: int, modes: tuple[str, ...], samples: int, chars: int, engine=None) -> tuple[float, GenerationStats, int]:
    engine = engine or FakeEngine(responder=responder(chars))
    stats = GenerationStats()
    t0 = time.perf_counter()
    with GenerationCache(cache_dir) as cache:
        count = sum(1 for _ in generate_rows(engine, "bench-model", rows(n), modes, samples, SAMPLING, cache,
                                             batch_size=64, total=n, stats=stats))
    return time.perf_counter() - t0, stats, count


def segment_alternative(cache_dir: Path, n: int, modes: tuple[str, ...], samples: int) -> dict:
    """JSONL segment + dict index rebuilt on open, over the same samples (copied out of SQLite)."""
    seg = cache_dir / "segment.jsonl"
    space = KeySpace("bench-model", "fake", "fake-1", SAMPLING)
    from generation.pipeline import default_render

    keys = [k for row in rows(n) for m in modes for k in space.keys(default_render(row, m).text, range(samples))]
    with GenerationCache(cache_dir) as cache, open(seg, "w") as fh:
        for start in range(0, len(keys), 2000):
            for k, s in cache.get_many(keys[start:start + 2000]).items():
                fh.write(k.hex() + "\t" + json.dumps({"text": s.text, "token_ids": s.token_ids, "finish": s.finish_reason}) + "\n")
    tracemalloc.start()
    t0 = time.perf_counter()
    index: dict[bytes, int] = {}
    with open(seg, "rb") as fh:  # rebuild the index: scan every record of every segment
        offset = 0
        for line in fh:
            index[bytes.fromhex(line[:32].decode())] = offset
            offset += len(line)
    opened = time.perf_counter() - t0
    index_mem = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    t1 = time.perf_counter()
    with open(seg, "rb") as fh:
        for k in keys:
            fh.seek(index[k])
            json.loads(fh.readline().split(b"\t", 1)[1])
    lookup = time.perf_counter() - t1
    return {"open_s": round(opened, 3), "lookup_s": round(lookup, 3), "index_bytes": index_mem,
            "segment_bytes": seg.stat().st_size}


def child_memory(n: int, modes: tuple[str, ...], samples: int, chars: int) -> dict:
    """In a fresh process: fill, then measure the cached streaming rerun's peak memory."""
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp), n, modes, samples, chars)
        tracemalloc.start()
        seconds, _, count = run(Path(tmp), n, modes, samples, chars)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {"prompts": n, "records": count, "rerun_s": round(seconds, 3), "tracemalloc_peak_bytes": peak,
            "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--modes", default="think,no_think")
    ap.add_argument("--response-chars", type=int, default=400, help="approximate characters per response")
    ap.add_argument("--child-memory", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    modes = tuple(args.modes.split(","))
    if args.child_memory:
        print(json.dumps(child_memory(args.child_memory, modes, args.samples, args.response_chars)))
        return
    n = args.rows
    print(f"settings: rows={n} modes={modes} samples={args.samples} (= {n * len(modes) * args.samples} samples) "
          f"response~{args.response_chars} chars, batch_size=64, fake engine, SQLite WAL synchronous=FULL, cores={os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = Path(tmp)
        fill_s, fill, _ = run(cache_dir, n, modes, args.samples, args.response_chars)
        print(f"fill (generate through the fake engine + cache writes): {fill_s:.2f} s, generated={fill.generated}, "
              f"engine calls={fill.engine_calls}, engine time={fill.engine_seconds:.2f} s, "
              f"cache file={(cache_dir / 'samples.sqlite').stat().st_size / 1e6:.1f} MB")
        engine = FakeEngine(responder=responder(args.response_chars))
        rerun_s, rerun, count = run(cache_dir, n, modes, args.samples, args.response_chars, engine)
        assert engine.calls == 0 and rerun.cached == count and rerun.generated == 0
        print(f"fully cached rerun (whole: open, render, key, lookup, stream {count} records): {rerun_s:.2f} s "
              f"({'OK' if rerun_s < 5 else 'OVER'} the 5 s budget), engine calls=0")
        t0 = time.perf_counter()
        with GenerationCache(cache_dir) as cache:
            stats = GenerationStats()
            result = rejection_sample(generate_rows(FakeEngine(), "bench-model", rows(n), modes, args.samples, SAMPLING,
                                                    cache, total=n, stats=stats), "math", None, max_per_prompt=1, stats=stats)
            version = result.data_version
        print(f"cached rerun + rejection filter + data version: {time.perf_counter() - t0:.2f} s "
              f"(kept {result.kept}, dropped {result.dropped}, data_version {version[:12]})")
        alt = segment_alternative(cache_dir, n, modes, args.samples)
        print(f"alternative, JSONL segment + index rebuilt on open: open {alt['open_s']} s, lookup {alt['lookup_s']} s, "
              f"index {alt['index_bytes'] / 1e6:.1f} MB in memory (grows with the cache's lifetime size), "
              f"segment {alt['segment_bytes'] / 1e6:.1f} MB")
    for size in (1000, 10_000):
        out = subprocess.run([sys.executable, __file__, "--child-memory", str(size), "--samples", str(args.samples),
                              "--modes", args.modes, "--response-chars", str(args.response_chars)],
                             capture_output=True, text=True, check=True)
        mem = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"memory, cached streaming rerun of {size} prompts ({mem['records']} records): tracemalloc peak "
              f"{mem['tracemalloc_peak_bytes'] / 1e6:.2f} MB, process ru_maxrss {mem['ru_maxrss_kib'] / 1024:.0f} MiB, "
              f"rerun {mem['rerun_s']} s")


if __name__ == "__main__":
    main()
