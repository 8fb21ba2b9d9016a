"""Per-core throughput and memory of each curation stage, for docs/scaling.md's projection.

One process, one core, one shard of `--rows` rows of the paper-shaped SFT corpus
(benchmarks/dedup_corpus.py: OpenAI-messages chat rows of ~250 words, 5 responses per prompt,
2% exact and 2% near duplicates planted), through the library calls the Dagster steps make
(assets/shards.py), each stage timed on its own:

  format mapping      curation.sources.load_source (jsonl decode, layout detection, canonical
                      rows, quarantine)
  decontamination     curation.decontam.decontaminate_table against HumanEval + GSM8K (13-grams)
  exact keys          blake2b digests of the normalised whole examples
  near-dup keys       shingles, MinHash signatures (128 perm.) and 14 LSH band keys
  buckets             candidate pairs of the keys (one partition)
  confirmation        equal text / exact Jaccard on the candidate rows' texts, read back from the
                      shard's parquet as a dedup step does
  cluster             connected components of the confirmed pairs
  assemble            the streamed merge without removed rows, written with its streamed
                      content hash (curation.versioning.write_versioned_batches)

For each stage: seconds, rows/s and MB/s of input text per core, and the growth of the
process's resident memory during the stage above the RSS when it started (sampled every 5 ms
from /proc/self/statm), plus the process's peak RSS. Prints one JSON object.

    python benchmarks/bench_curation_stages.py [--rows 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from dedup_corpus import make_corpus  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


@contextmanager
def _stage(name: str, results: dict, rows: int, text_mb: float) -> Iterator[None]:
    start_rss, peak, stop = _rss(), [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            stop.wait(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    yield
    seconds = time.perf_counter() - t0
    stop.set()
    thread.join()
    peak[0] = max(peak[0], _rss())
    results[name] = {"seconds": round(seconds, 3), "rows_per_s": round(rows / seconds), "mb_per_s": round(text_mb / seconds, 2),
                     "rss_growth_mb": round((peak[0] - start_rss) / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    args = parser.parse_args()

    from curation.decontam import decontaminate_table
    from curation.decontam_index import BenchmarkIndex
    from curation.dedup_params import DedupParams, text_column
    from curation.dedup_stages import candidate_pairs, cluster, confirm_pairs, digests, row_keys
    from curation.shards import ORDINAL, ShardTexts, assemble, write_shard_rows
    from curation.sources import load_benchmark, load_source
    from curation.versioning import write_versioned_batches

    path, _ = make_corpus(args.rows)
    text_mb = path.stat().st_size / 2**20
    params = DedupParams()
    results: dict[str, dict] = {}
    n = args.rows
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        with _stage("format mapping", results, n, text_mb):
            loaded = load_source(path, "auto", "chat", "web", ordinal_column=ORDINAL)
        benches = {b: load_benchmark(builtin=b) for b in ("humaneval", "gsm8k")}
        index = BenchmarkIndex.build(benches, n=13)
        with _stage("decontamination", results, n, text_mb):
            rows = loaded.table.drop_columns([ORDINAL])
            _, hits = decontaminate_table(rows, index, None)
            keep = np.ones(loaded.table.num_rows, dtype=bool)
            keep[[h.row for h in hits]] = False
            table = loaded.table.filter(pa.array(keep))
        write_shard_rows(table, tmp_path / "shard.parquet")
        texts = text_column(table.drop_columns([ORDINAL]), None)
        positions = np.asarray(table.column(ORDINAL), dtype=np.int64)
        with _stage("exact keys", results, n, text_mb):
            digests(texts)
        with _stage("near-dup keys (+ exact)", results, n, text_mb):
            keys = row_keys(texts, positions, 0, params)
        with _stage("buckets", results, n, text_mb):
            pairs = candidate_pairs(keys)
        with _stage("confirmation", results, n, text_mb):
            edges = confirm_pairs(pairs, ShardTexts({0: tmp_path / "shard.parquet"}, None), params)
        with _stage("cluster", results, n, text_mb):
            removed = cluster([edges])
        with _stage("assemble + write", results, n, text_mb):
            schema = table.drop_columns([ORDINAL]).schema
            write_versioned_batches(assemble([tmp_path / "shard.parquet"], removed), schema, tmp_path / "out", "web",
                                    rows_in=table.num_rows, dropped={"removed": removed.num_rows}, inputs=[],
                                    code_version="bench", config={})
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": n, "input_mb": round(text_mb, 1), "quarantined": loaded.quarantine.num_rows,
                      "contaminated": len(hits), "candidate_pairs": pairs.num_rows, "edges": edges.num_rows,
                      "removed": removed.num_rows, "peak_rss_mb": round(peak_mb), "stages": results}, indent=1))


if __name__ == "__main__":
    main()
