"""One canonical row: the value rules every reader's records pass (curation/sources.py lists
them), and the row's stable id.

Kept apart from the readers so that sources.py is about reading; `canonical_row` is the only
validator, whatever the file type or layout.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import pyarrow as pa

from curation.schemas import InvalidRow

JSON_FIELDS = frozenset({"tests", "kwargs", "tools"})


def row_id(source_name: str, values: list[Any]) -> str:
    """Stable id: blake2b-64 of the source name and the canonical field values."""
    payload = json.dumps([source_name, values], ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(payload.encode("utf-8"), digest_size=8).hexdigest()


def _check_text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRow("undecodable_text") from None
    return value


def _string_value(name: str, value: Any) -> str:
    if isinstance(value, str):
        return _check_text(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if name in JSON_FIELDS and isinstance(value, (dict, list)):
        return _check_text(json.dumps(value, ensure_ascii=False))
    raise InvalidRow(f"wrong_type:{name}")


def canonical_row(obj: Mapping[str, Any], schema: pa.Schema, source_name: str) -> dict[str, Any]:
    """Validate {canonical field: raw value} against `schema` (the value rules above)."""
    row: dict[str, Any] = {}
    for f in schema:
        if f.name in ("row_id", "source"):
            continue
        value = obj.get(f.name)
        if value is None:
            if not f.nullable:
                raise InvalidRow(f"missing_field:{f.name}")
        elif pa.types.is_list(f.type):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidRow(f"wrong_type:{f.name}")
            value = [_check_text(v) for v in value]
            if not f.nullable and not value:
                raise InvalidRow(f"empty_field:{f.name}")
        else:
            value = _string_value(f.name, value)
            if not f.nullable and not value.strip():
                raise InvalidRow(f"empty_field:{f.name}")
        row[f.name] = value
    values = [row.get(f.name) for f in schema if f.name not in ("row_id", "source")]
    return {"row_id": row_id(source_name, values), "source": source_name, **row}
