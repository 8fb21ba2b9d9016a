"""Sharded curation on Dagster's multiprocess executor: 1 worker vs 2 workers, side by side.

Curates one ~--mb MB chat source (benchmarks/curation_corpus.py documents as responses, their
first words as prompts; 3% exact duplicates re-cased, 3% near duplicates with one word changed,
~0.5% rows with a benchmark span) against HumanEval + GSM8K, as `cascade run` whole processes
(start-up, reading, quarantine, decontamination, dedup, writing), each in a fresh
CASCADE_HOME / DAGSTER_HOME:

* `workers=1`: `shards: S`, `execution: {executor: multiprocess, max_concurrent: 1}`;
* `workers=2`: the same recipe with `max_concurrent: 2`;
* with --unsharded, also the plain path (no shards, in process) for reference.

Every run must give the same data version of `curated/clean_web`; the wall-time ratio
workers=2 / workers=1 is printed (target <= 0.62 on 2 cores). Rounds alternate the order.

    nice python benchmarks/bench_sharded_curation.py [--mb 200] [--shards 2] [--rounds 1] [--unsharded]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]


def make_corpus(megabytes: int) -> Path:
    """A cached chat jsonl of about `megabytes` MB with duplicates and near duplicates."""
    from curation_corpus import cache_dir, documents
    from curation.sources import load_benchmark

    path = cache_dir() / f"sharded_chat_{megabytes}mb.jsonl"
    if path.exists():
        return path
    bench = load_benchmark(builtin="gsm8k").column("question").to_pylist()
    rng = random.Random(0)
    tmp = path.with_suffix(".tmp")
    written, batch = 0, 0
    with open(tmp, "w", encoding="utf-8") as fh:
        while written < megabytes * 1_000_000:
            lines = []
            for doc in documents(5000, seed=1000 + batch, bench_texts=bench):
                words = doc.split()
                row = {"prompt": " ".join(words[:25]) + "?", "no_think_response": doc}
                lines.append(json.dumps(row, ensure_ascii=False))
                r = rng.random()
                if r < 0.03:
                    lines.append(json.dumps({**row, "prompt": row["prompt"].upper()}, ensure_ascii=False))
                elif r < 0.06 and len(words) > 30:
                    near = words[:25]
                    near[rng.randrange(25)] = "changed"
                    lines.append(json.dumps({**row, "prompt": " ".join(near) + "?"}, ensure_ascii=False))
            text = "\n".join(lines) + "\n"
            fh.write(text)
            written += len(text.encode())
            batch += 1
    tmp.rename(path)
    return path


def recipe(corpus: Path, shards: int, executor: str, workers: int) -> dict:
    return {
        "name": "bench_sharded",
        "sources": [{"name": "web", "domain": "chat", "path": str(corpus), "shards": shards}],
        "benchmarks": [{"name": "humaneval", "builtin": "humaneval"}, {"name": "gsm8k", "builtin": "gsm8k"}],
        "execution": {"executor": executor, "max_concurrent": workers},
    }


def run(spec: dict, work: Path, label: str) -> tuple[float, str]:
    """Wall seconds of `cascade run` in fresh homes, and the data version of clean_web."""
    home = work / label
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    (home / "recipe.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "CASCADE_HOME": str(home / "cascade"), "DAGSTER_HOME": str(home / "dagster"),
           "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"}
    cli = [sys.executable, "-m", "dagster_project.cli"]
    start = time.perf_counter()
    done = subprocess.run([*cli, "run", "--recipe", str(home / "recipe.yaml")], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{label} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    status = subprocess.run([*cli, "status", "--recipe", str(home / "recipe.yaml"), "--json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=True)
    version = next(r["data_version"] for r in json.loads(status.stdout) if r["asset"] == "clean_web")
    shutil.rmtree(home, ignore_errors=True)
    return wall, version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="corpus size in MB of jsonl")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--unsharded", action="store_true", help="also time the unsharded in-process path")
    args = parser.parse_args()

    corpus = make_corpus(args.mb)
    rows = sum(1 for _ in open(corpus, "rb"))
    print(f"corpus {corpus} ({corpus.stat().st_size / 1e6:.0f} MB, {rows} rows); {args.shards} shards; "
          f"{os.cpu_count()} CPUs; benchmarks humaneval + gsm8k; dedup exact + MinHash (defaults)", flush=True)
    runs = {"workers=1": recipe(corpus, args.shards, "multiprocess", 1),
            "workers=2": recipe(corpus, args.shards, "multiprocess", 2)}
    if args.unsharded:
        runs["unsharded in_process"] = recipe(corpus, 1, "in_process", 1)
    times: dict[str, list[float]] = {k: [] for k in runs}
    versions: dict[str, set[str]] = {k: set() for k in runs}
    with tempfile.TemporaryDirectory(prefix="bench_sharded_") as tmp:
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for label in order:
                wall, version = run(runs[label], Path(tmp), label.replace(" ", "_"))
                times[label].append(wall)
                versions[label].add(version)
                print(f"  round {r + 1}: {label:<22} {wall:7.1f} s  clean_web {version}", flush=True)
    print(f"\n{'run':<22} {'wall s (median)':>16}  data version")
    for label in runs:
        print(f"{label:<22} {statistics.median(times[label]):16.1f}  {', '.join(sorted(versions[label]))}")
    same = len(set().union(*versions.values())) == 1
    ratio = statistics.median(times["workers=2"]) / statistics.median(times["workers=1"])
    print(f"\nratio workers=2 / workers=1: {ratio:.2f}x (target <= 0.62); same output version: {same}")
    if not same:
        raise SystemExit("data versions differ")


if __name__ == "__main__":
    main()
