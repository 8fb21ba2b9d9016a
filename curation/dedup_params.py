"""What dedup compares: its settings and the text of a row it keys on.

The dedup unit is the whole example, not the prompt: the paper's SFT corpora carry several
responses per prompt (7.8 per math prompt, up to 17.6 per code prompt), and each is a sample
to keep. So by default a row's dedup text is its system prompt, prompt and response(s)
(`think_response`, `no_think_response`; `chosen` and `rejected` for preference pairs); reference
columns a verifier reads (`answer`, `tests`, `tools`, ...) are not part of it (a shared tool
schema would make unrelated rows look alike). A domain without a `prompt` column (SWE
instances) keys on every string column. RL prompt sets dedup on the prompt later
(`curation.prompts`). `curation.dedup.fields` in the recipe overrides the fields per domain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

EXAMPLE_FIELDS = ("system", "prompt", "think_response", "no_think_response", "chosen", "rejected")
"""The columns of a whole example, in the order they are joined (those the table has)."""


@dataclass
class NearDupParams:
    """MinHash-LSH settings (mirrors the recipe's `curation.dedup.near`)."""

    enabled: bool = True
    """Run near-duplicate removal at all."""
    shingle_size: int = 5
    """Words per shingle."""
    num_perm: int = 128
    """MinHash permutations."""
    threshold: float = 0.8
    """Rows whose shingle-set Jaccard similarity is >= this are near-duplicates."""
    seed: int = 1
    """datasketch permutation seed (1 is datasketch's default)."""
    lsh_weights: tuple[float, float] = (0.1, 0.9)
    """(false positive, false negative) weights of the LSH band choice: favour recall, since
    every candidate is checked exactly anyway."""


@dataclass
class DedupParams:
    """What `dedup` removes (mirrors the recipe's `curation.dedup`)."""

    exact: bool = True
    """Drop rows whose normalised text repeats."""
    near: NearDupParams = field(default_factory=NearDupParams)
    """Near-duplicate settings."""
    fields: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Domain -> the columns of its dedup text (absent: `dedup_fields`' default)."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DedupParams":
        """Build from the recipe's dedup mapping (`DedupConfig.model_dump()`)."""
        return cls(exact=data.get("exact", True), near=NearDupParams(**dict(data.get("near") or {})),
                   fields={k: list(v) for k, v in dict(data.get("fields") or {}).items()})

    def fields_for(self, domain: str | None) -> list[str] | None:
        """The recipe's fields for `domain` (None: the default whole example)."""
        chosen = self.fields.get(domain) if domain else None
        return list(chosen) if chosen else None


def dedup_fields(schema: pa.Schema) -> list[str]:
    """The default dedup text of a table: the whole example (EXAMPLE_FIELDS it has) when it has a
    `prompt`, else every string column but row_id/source."""
    if "prompt" in schema.names:
        return [f for f in EXAMPLE_FIELDS if f in schema.names]
    return [f.name for f in schema if pa.types.is_string(f.type) and f.name not in ("row_id", "source")]


def text_column(table: pa.Table, fields: Sequence[str] | None) -> pa.Array:
    """The dedup text of each row: `fields` (default `dedup_fields`) joined with newlines, nulls
    as empty strings."""
    chosen = list(fields) if fields else dedup_fields(table.schema)
    missing = [f for f in chosen if f not in table.column_names]
    if missing:
        raise KeyError(f"dedup fields {missing} not in columns {table.column_names}")
    if not chosen:
        return pa.array([""] * table.num_rows, pa.string())
    cols = [pc.fill_null(table.column(f).cast(pa.string()), "") for f in chosen]
    joined = cols[0] if len(cols) == 1 else pc.binary_join_element_wise(*cols, "\n")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined
