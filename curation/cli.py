"""`cascade decontam`: n-gram decontamination of a jsonl/parquet file against benchmark files.

Streams the input in record batches of a few MB (parquet rows / jsonl blocks) and writes
kept rows as they come, so memory does not grow with the input. Imports only pyarrow and
numpy, and only when the command runs: start-up is part of every run's time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import pyarrow as pa

_BATCH_BYTES = 4 << 20  # parquet: rows per batch sized from the file's average row
_JSON_BLOCK = 16 << 20  # jsonl: the schema is inferred from the first block and must hold for the rest


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `decontam` subcommand."""
    p = subparsers.add_parser(
        "decontam",
        help="drop rows sharing an n-gram with a benchmark",
        description="Drop every input row that shares at least one normalised n-gram with a benchmark row.",
    )
    p.add_argument("--benchmark", action="append", required=True, metavar="NAME=PATH",
                   help="benchmark jsonl/parquet (repeatable); every string field is hashed")
    p.add_argument("--input", required=True, type=Path, help="corpus jsonl or parquet")
    p.add_argument("--output", required=True, type=Path, help="parquet of the kept rows, in input order")
    p.add_argument("--report", type=Path, help="JSON report of the dropped rows")
    p.add_argument("--ngram", type=int, default=9, help="n-gram length in words (default 9)")
    p.add_argument("--fields", help="comma-separated corpus fields to check (default: every string column)")
    p.add_argument("--workers", type=int, help="threads hashing text (default: every core); the output does not depend on it")
    p.set_defaults(func=handler)


def _input_batches(path: Path) -> Iterator[pa.RecordBatch]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        # pre_buffer keeps every read range cached until the file closes: memory would grow;
        # buffer_size streams pages instead of reading whole column chunks (whole row groups).
        parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
        meta = parquet.metadata
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        rows = max(1, min(65536, _BATCH_BYTES * meta.num_rows // max(size, 1)))
        yield from parquet.iter_batches(batch_size=rows)
        return
    import pyarrow.json as pj

    with open(path, "rb") as fh:
        if not fh.read(1 << 16).strip():
            return  # an empty file has no rows (and no schema to infer)
    yield from pj.open_json(path, read_options=pj.ReadOptions(block_size=_JSON_BLOCK))


def _read_benchmark(path: str) -> pa.Table:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        # Not pq.read_table: its dataset layer imports pandas (~0.4 s of start-up).
        return pq.ParquetFile(path).read()
    from curation.sources import read_table

    return read_table(path)


def _keep_freed_memory() -> None:
    """glibc: serve each chunk's numpy temporaries from memory this process already has.

    By default blocks over 128 KB-32 MB are mmap'ed and unmapped on free, so every chunk
    faults its temporaries in again: 15-25% of a run went to page faults. Process-wide, hence
    only in this one-shot command; elsewhere (musl, macOS) a no-op."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 64 << 20)
    mallopt(m_trim_threshold, 256 << 20)


def handler(args: argparse.Namespace) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.decontam import decontaminate
    from curation.decontam_index import BenchmarkIndex, string_columns

    if args.ngram < 1:
        raise ValueError("--ngram must be >= 1")
    if args.workers is not None and args.workers < 1:
        raise ValueError("--workers must be >= 1")
    _keep_freed_memory()
    benchmarks: dict[str, pa.Table] = {}
    for spec in args.benchmark:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--benchmark expects NAME=PATH, got {spec!r}")
        if name in benchmarks:
            raise ValueError(f"benchmark {name!r} given twice")
        benchmarks[name] = _read_benchmark(path)
    if not args.input.exists():
        raise FileNotFoundError(f"input not found: {args.input}")
    index = BenchmarkIndex.build(benchmarks, n=args.ngram)
    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    rows_in = 0
    dropped = []
    writer = None
    args.output.parent.mkdir(parents=True, exist_ok=True)
    try:
        for out in decontaminate(_input_batches(args.input), index, fields, args.workers):
            if writer is None:
                # No dictionary for the checked text: documents rarely repeat, and arrow would
                # build one per column chunk only to give it up (a third of the writing time).
                # No min/max either: useless for whole documents, and kept in memory per row group.
                text = set(fields or string_columns(out.kept.schema))
                plain = [f.name for f in out.kept.schema if f.name not in text]
                writer = pq.ParquetWriter(args.output, out.kept.schema, use_dictionary=plain, write_statistics=plain)
            writer.write_batch(out.kept)
            rows_in += out.rows_in
            dropped += out.dropped
        if writer is None:  # empty input: still write a (column-less) parquet
            writer = pq.ParquetWriter(args.output, pa.schema([]))
    finally:
        if writer is not None:
            writer.close()
    by_benchmark = {name: 0 for name in benchmarks}
    for c in dropped:
        by_benchmark[c.benchmark] += 1
    report = {
        "rows_in": rows_in,
        "rows_kept": rows_in - len(dropped),
        "rows_dropped": len(dropped),
        "by_benchmark": by_benchmark,
        "dropped": [c.as_report() for c in dropped],
    }
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    print(f"decontam: {rows_in} rows in, {report['rows_kept']} kept, {len(dropped)} dropped {by_benchmark}")
    return 0
