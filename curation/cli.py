"""`cascade decontam`: n-gram decontamination of a jsonl/parquet file against benchmark files.

Streams the input in record batches (parquet row groups / jsonl blocks) and writes kept
rows as they come, so memory does not grow with the input. Imports only pyarrow/numpy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import pyarrow as pa

_BATCH_ROWS = 65536


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
    p.set_defaults(func=handler)


def _input_batches(path: Path) -> Iterator[pa.RecordBatch]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        # pre_buffer keeps every read range cached until the file closes: memory would grow.
        yield from pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=_BATCH_ROWS)
        return
    import pyarrow.json as pj

    if not path.read_bytes()[:1 << 16].strip():
        return  # an empty file has no rows (and no schema to infer)

    # Large blocks: the schema is inferred from the first block and must hold for the rest.
    reader = pj.open_json(path, read_options=pj.ReadOptions(block_size=16 << 20))
    yield from reader


def handler(args: argparse.Namespace) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.decontam import BenchmarkIndex, decontaminate
    from curation.sources import read_table

    if args.ngram < 1:
        raise ValueError("--ngram must be >= 1")
    benchmarks: dict[str, pa.Table] = {}
    for spec in args.benchmark:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--benchmark expects NAME=PATH, got {spec!r}")
        if name in benchmarks:
            raise ValueError(f"benchmark {name!r} given twice")
        benchmarks[name] = read_table(path)
    if not args.input.exists():
        raise FileNotFoundError(f"input not found: {args.input}")
    index = BenchmarkIndex.build(benchmarks, n=args.ngram)
    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    rows_in = 0
    dropped = []
    writer = None
    args.output.parent.mkdir(parents=True, exist_ok=True)
    try:
        for out in decontaminate(_input_batches(args.input), index, fields):
            if writer is None:
                writer = pq.ParquetWriter(args.output, out.kept.schema)
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
