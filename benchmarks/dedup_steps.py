"""The steps of benchmarks/bench_dedup_scale.py, each run in its own process (`--step NAME`).

The sharded ones make the library calls and write the versioned files of the Dagster steps of
assets/shards.py (`_shard_op`, `_dedup_op`, `_cluster_op`, `_assemble_op`), without Dagster;
`inprocess` is the unsharded path; `prep`, `ours` and `datatrove` are the throughput figure's.
A step gets its inputs as a JSON spec and returns a JSON-able result.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SOURCE = {"name": "sft", "format": "auto"}
DOMAIN, NGRAM, CODE = "chat", 9, "bench_dedup_scale"

def _params():
    from curation.dedup_params import DedupParams

    return DedupParams()


def _index(spec: dict):
    import pyarrow.parquet as pq

    from curation.decontam_index import BenchmarkIndex

    benches = {b: pq.read_table(p) for b, p in spec["benches"].items()}
    return BenchmarkIndex.build(benches, n=NGRAM, fields={b: None for b in benches})


def _version(out, **extra) -> dict:
    return {"asset": out.record["asset"], "path": str(out.folder), "data_version": out.data_version, **extra}


def step_shard(spec: dict) -> dict:
    """assets/shards.py `_shard_op`."""
    from curation.shards import ORDINAL, ROW_GROUP_ROWS, curate_shard
    from curation.versioning import write_versioned
    from spec.consistent_read import read_consistent

    path, k, n = Path(spec["corpus"]), spec["k"], spec["shards"]
    index = _index(spec)
    shard, digest = read_consistent(path, lambda: curate_shard(path, SOURCE, DOMAIN, k, n, index, lambda schema: None,
                                                               _params(), partitions=n), f"source {path}")
    ordinals = shard.load.table.column(ORDINAL).to_pylist()
    out = write_versioned(
        shard.table, Path(spec["root"]), f"clean_sft_shards/{k}", rows_in=shard.load.rows_in, dropped=shard.dropped,
        row_group_rows=ROW_GROUP_ROWS, inputs=[{"asset": "sft_file", "data_version": digest, "path": str(path)},
                                               *spec["bench_refs"]],
        code_version=CODE, config={"shard": k, "shards": n},
        extra_files={"quarantine.parquet": shard.load.quarantine,
                     **{f"keys_{j}.parquet": keys for j, keys in enumerate(shard.keys)},
                     "decontam_dropped.json": [h.as_report() | {"field": h.field, "ordinal": ordinals[h.row]}
                                               for h in shard.hits]})
    return _version(out, source_version=digest, rows_in=shard.load.rows_in, valid=shard.load.table.num_rows)


def step_partition(spec: dict) -> dict:
    """assets/shards.py `_dedup_op`."""
    import pyarrow.parquet as pq

    from curation.shards import ShardTexts, confirm_partition
    from curation.versioning import write_versioned

    parts, j, params = spec["parts"], spec["j"], _params()
    keys = [pq.read_table(Path(p["path"]) / f"keys_{j}.parquet") for p in parts]
    texts = ShardTexts({k: Path(p["path"]) / "data.parquet" for k, p in enumerate(parts)}, params.fields_for(DOMAIN))
    edges = confirm_partition(keys, texts, params)
    out = write_versioned(edges, Path(spec["root"]), f"clean_sft_edges/{j}", rows_in=edges.num_rows, dropped={},
                          inputs=parts, code_version=CODE, config={"partition": j, "partitions": len(parts)})
    return _version(out, edges=edges.num_rows)


def step_cluster(spec: dict) -> dict:
    """assets/shards.py `_cluster_op`."""
    import pyarrow.parquet as pq

    from curation.dedup_stages import cluster
    from curation.versioning import write_versioned

    removed = cluster([pq.read_table(Path(e["path"]) / "data.parquet") for e in spec["edges"]])
    out = write_versioned(removed, Path(spec["root"]), "clean_sft_removed", rows_in=removed.num_rows, dropped={},
                          inputs=spec["edges"], code_version=CODE, config={})
    return _version(out, removed=removed.num_rows)


def step_assemble(spec: dict) -> dict:
    """assets/shards.py `_assemble_op` (without the Dagster metadata): `curation.shards.write_clean`."""
    import pyarrow.parquet as pq

    from curation.schemas import DOMAIN_SCHEMAS
    from curation.shards import write_clean

    parts, removed = spec["parts"], spec["removed"]
    out = write_clean([Path(p["path"]) for p in parts], pq.read_table(Path(removed["path"]) / "data.parquet"),
                      DOMAIN_SCHEMAS[DOMAIN], Path(spec["root"]), "clean_sft", valid_rows=sum(p["valid"] for p in parts),
                      inputs=[*parts, removed], code_version=CODE, config={})
    if out.record["rows_out"]:
        pq.ParquetFile(out.path).read_row_group(0).slice(0, 5).to_pylist()  # the step's preview
    return _version(out, rows_out=out.record["rows_out"], dropped=out.record["dropped"])


def step_inprocess(spec: dict) -> dict:
    """The unsharded path in one process: load, decontaminate, `curation.dedup.dedup`, content hash."""
    from curation.decontam import decontaminate_table
    from curation.dedup import dedup
    from curation.sources import load_source
    from curation.content_hash import content_hash

    loaded = load_source(spec["corpus"], "auto", DOMAIN, SOURCE["name"])
    kept, _ = decontaminate_table(loaded.table, _index(spec), None)
    result = dedup([kept], _params())
    return {"hash": content_hash(result.tables[0]), "rows_out": result.tables[0].num_rows,
            "removed_ids": sorted(result.dropped.column("row_id").to_pylist())}


def step_prep(spec: dict) -> dict:
    """The throughput input: canonical rows (with ORDINAL) and, for datatrove, (id, dedup text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.dedup_params import text_column
    from curation.shards import ORDINAL, write_shard_rows
    from curation.sources import load_source

    table = load_source(spec["corpus"], "auto", DOMAIN, SOURCE["name"], ordinal_column=ORDINAL).table
    write_shard_rows(table, Path(spec["rows"]))
    Path(spec["dt_in"]).mkdir(parents=True)
    texts = text_column(table.drop_columns([ORDINAL]), _params().fields_for(DOMAIN))
    pq.write_table(pa.table({"id": table.column(ORDINAL).cast(pa.string()), "text": texts}),
                   Path(spec["dt_in"]) / "rows.parquet")
    return {"rows": table.num_rows}


def _one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)


def step_ours(spec: dict) -> dict:
    _one_core()
    import numpy as np
    import pyarrow.parquet as pq

    from curation.dedup_params import text_column
    from curation.dedup_stages import cluster, row_keys, split_keys
    from curation.schemas import DOMAIN_SCHEMAS
    from curation.shards import ORDINAL, ShardTexts, assemble, confirm_partition

    import datasketch  # noqa: F401 - imported lazily by the first stage: imports are outside both timings
    import scipy.sparse.csgraph  # noqa: F401

    rows, params = Path(spec["rows"]), _params()
    t0, c0 = time.perf_counter(), time.process_time()
    table = pq.read_table(rows)
    texts = text_column(table.drop_columns([ORDINAL]), params.fields_for(DOMAIN))
    keys = row_keys(texts, np.asarray(table.column(ORDINAL), dtype=np.int64), 0, params)
    del table, texts
    edges = confirm_partition(split_keys(keys, 1), ShardTexts({0: rows}, params.fields_for(DOMAIN)), params)
    removed = cluster([edges])
    with pq.ParquetWriter(spec["out"], DOMAIN_SCHEMAS[DOMAIN]) as writer:
        for batch in assemble([rows], removed):
            writer.write_batch(batch)
    return {"work_s": time.perf_counter() - t0, "work_cpu": time.process_time() - c0,
            "removed": removed.column("pos").to_pylist()}


def step_datatrove(spec: dict) -> dict:
    _one_core()
    import pyarrow.parquet as pq
    import xxhash
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Whitespace(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    work, src = Path(spec["work"]), spec["dt_in"]
    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=9)

    def run(name: str, pipeline: list, tasks: int = 1) -> None:
        LocalPipelineExecutor(pipeline, tasks=tasks, workers=1, logging_dir=str(work / "logs" / name)).run()

    signature = MinhashDedupSignature(str(work / "sigs"), config=config, language=Whitespace("en"))
    signature._hash_func = lambda s: xxhash.xxh64_intdigest(s.encode("utf-8"))  # xxhash 4 no longer hashes str
    t0, c0 = time.perf_counter(), time.process_time()
    run("sigs", [ParquetReader(src, text_key="text", id_key="id"), signature])
    run("buckets", [MinhashDedupBuckets(str(work / "sigs"), str(work / "buckets"), config=config)], config.num_buckets)
    run("cluster", [MinhashDedupCluster(str(work / "buckets"), str(work / "remove"), config=config)])
    run("filter", [ParquetReader(src, text_key="text", id_key="id"), MinhashDedupFilter(str(work / "remove")),
                   ParquetWriter(str(work / "out"))])
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    kept = {int(i) for f in (work / "out").rglob("*.parquet") for i in pq.read_table(f, columns=["id"])["id"].to_pylist()}
    every = pq.read_table(Path(src) / "rows.parquet", columns=["id"])["id"].to_pylist()
    return {"work_s": seconds, "work_cpu": cpu, "removed": sorted(int(i) for i in every if int(i) not in kept)}


STEPS = {"shard": step_shard, "partition": step_partition, "cluster": step_cluster, "assemble": step_assemble,
         "inprocess": step_inprocess, "prep": step_prep, "ours": step_ours, "datatrove": step_datatrove}
