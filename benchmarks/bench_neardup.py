"""Near-duplicate removal: our numpy MinHash signatures vs a per-document datasketch loop.

Both sides run the same MinHashLSH (threshold, permutations, LSH weights of the recipe
defaults) and the same decision (exact Jaccard of the shingle sets >= threshold); they
differ only in how signatures are computed: ours for all rows at once in numpy, the
baseline with `datasketch.MinHash.update` per shingle, per document. Planted near-duplicates
are copies of corpus documents with a few words replaced, kept only when their true
5-shingle Jaccard is >= 0.8; recall is the share of them each side drops.

    nice python benchmarks/bench_neardup.py [--docs 20000] [--planted 1000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from curation_corpus import documents  # noqa: E402

from curation.dedup import dedup  # noqa: E402
from curation.dedup_params import DedupParams, NearDupParams  # noqa: E402
from curation.minhash import jaccard  # noqa: E402
from curation.sources import load_benchmark  # noqa: E402
from curation.text import normalize_words  # noqa: E402


def _shingles(text: str, k: int) -> list[str]:
    words = normalize_words(text)
    return [" ".join(words[i : i + k]) for i in range(len(words) - k + 1)] or ([" ".join(words)] if words else [])


def planted_corpus(n_docs: int, n_planted: int, k: int, seed: int = 0) -> tuple[list[str], dict[int, int]]:
    """Documents plus near-copies (true Jaccard >= 0.8); returns {copy index: original index}."""
    bench = [v for v in load_benchmark(builtin="gsm8k").column("question").to_pylist()]
    docs = documents(n_docs, seed=seed + 100, bench_texts=bench)
    rng = random.Random(seed)
    planted: dict[int, int] = {}
    while len(planted) < n_planted:
        src = rng.randrange(n_docs)
        words = docs[src].split()
        for _ in range(max(1, len(words) // rng.choice([60, 80, 120]))):
            words[rng.randrange(len(words))] = f"edit{rng.randrange(10**6)}"
        copy = " ".join(words)
        a, b = set(_shingles(docs[src], k)), set(_shingles(copy, k))
        if len(a | b) and len(a & b) / len(a | b) >= 0.8 and copy != docs[src]:
            planted[len(docs)] = src
            docs.append(copy)
    return docs, planted


def ours(docs: list[str], params: NearDupParams) -> set[int]:
    table = pa.table({"row_id": [str(i) for i in range(len(docs))], "prompt": docs})
    res = dedup([table], DedupParams(exact=False, near=params))
    return {int(r) for r in res.dropped.column("row_id").to_pylist()}


def baseline(docs: list[str], params: NearDupParams) -> set[int]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=params.threshold, num_perm=params.num_perm, weights=params.lsh_weights)
    kept_sets: dict[int, np.ndarray] = {}
    dropped = set()
    for i, doc in enumerate(docs):
        shingles = _shingles(doc, params.shingle_size)
        m = MinHash(num_perm=params.num_perm, seed=params.seed)
        for s in shingles:
            m.update(s.encode("utf-8"))
        ids = np.unique(np.array([hash(s) for s in shingles], dtype=np.int64))  # same exact-Jaccard decision
        if any(jaccard(ids, kept_sets[c]) >= params.threshold for c in lsh.query(m)):
            dropped.add(i)
            continue
        lsh.insert(i, m, check_duplication=False)
        kept_sets[i] = ids
    return dropped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--planted", type=int, default=1000)
    args = ap.parse_args()
    params = NearDupParams()
    import datasketch  # noqa: F401 - import cost (scipy) outside both timings
    docs, planted = planted_corpus(args.docs, args.planted, params.shingle_size)
    print(f"{len(docs)} documents ({sum(map(len, docs)) / 1e6:.1f} MB), {len(planted)} planted near-duplicates "
          f"(Jaccard >= 0.8), shingle {params.shingle_size}, {params.num_perm} perms, threshold {params.threshold}")
    results = []
    for name, fn in (("ours (numpy signatures)", ours), ("datasketch per-document loop", baseline)):
        t0 = time.process_time()
        dropped = fn(docs, params)
        cpu = time.process_time() - t0
        recall = len(dropped & set(planted)) / len(planted)
        results.append((name, cpu, recall, len(dropped - set(planted))))
    base_cpu = results[1][1]
    print(f"\n{'engine':30} {'cpu s':>8} {'speedup':>8} {'recall':>7} {'other drops':>12}")
    for name, cpu, recall, other in results:
        print(f"{name:30} {cpu:8.2f} {base_cpu / cpu:7.1f}x {recall:7.3f} {other:12d}")


if __name__ == "__main__":
    main()
