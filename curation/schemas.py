"""Canonical row schemas, one per domain.

Every source is mapped onto one of these pyarrow schemas before anything else touches it,
so curation, rewards and the trainer agree on column names. Every row keeps `source` (the
recipe's source name) and a stable `row_id` (derived from content, so it survives re-reads).

Nested or heterogeneous values (code tests, IFEval kwargs, tool signatures, chat messages)
are stored as JSON strings: they stay readable in any parquet viewer and hash stably.

A raw row that cannot become a canonical row raises `InvalidRow(reason)`; the reason is the
quarantine reason. It is defined here, once, so the readers (curation/sources.py) and the
row layouts (curation/formats.py) raise the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

STR = pa.string()
STR_LIST = pa.list_(pa.string())

class InvalidRow(Exception):
    """A raw row that cannot be mapped onto its canonical schema; `reason` is its quarantine reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_COMMON = [pa.field("row_id", STR, nullable=False), pa.field("source", STR, nullable=False)]


def _schema(*fields: pa.Field) -> pa.Schema:
    return pa.schema(_COMMON + list(fields))


# Required fields are nullable=False; optional ones may be null.
DOMAIN_SCHEMAS: dict[str, pa.Schema] = {
    # General chat: parallel thinking / non-thinking responses for one prompt.
    # Responses are full assistant texts: think_response = "<think>...</think>answer",
    # no_think_response has no think block (same convention in every domain below).
    "chat": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("think_response", STR),
        pa.field("no_think_response", STR),
        pa.field("ground_truth", STR),  # e.g. an MCQ letter responses must agree with
        pa.field("system", STR),  # the row's own system prompt (replaces the default one)
    ),
    "math": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("answer", STR, nullable=False),  # reference answer (LaTeX or plain)
        pa.field("think_response", STR),
        pa.field("no_think_response", STR),
    ),
    # tests: JSON string, format documented in rewards/code.py (kind=stdio | assert).
    "code": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("tests", STR, nullable=False),
        pa.field("solution", STR),
        pa.field("think_response", STR),
        pa.field("no_think_response", STR),
    ),
    "science": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("answer", STR, nullable=False),
        pa.field("think_response", STR),
        pa.field("no_think_response", STR),
    ),
    # IFEval taxonomy: kwargs is a JSON list of dicts, one per instruction id.
    "instruction": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("instruction_id_list", STR_LIST, nullable=False),
        pa.field("kwargs", STR, nullable=False),
        pa.field("think_response", STR),
        pa.field("no_think_response", STR),
    ),
    # tools: JSON list of function signatures; response contains <tool_call> blocks.
    "tool": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("tools", STR, nullable=False),
        pa.field("think_response", STR),
        pa.field("no_think_response", STR),
        pa.field("system", STR),  # the row's own system prompt (tools block still appended)
    ),
    # candidate_patches: teacher patches to be scored against golden_patch (SFT/RL split).
    "swe": _schema(
        pa.field("repo", STR, nullable=False),
        pa.field("base_commit", STR, nullable=False),
        pa.field("issue", STR, nullable=False),
        pa.field("code_context", STR, nullable=False),
        pa.field("golden_patch", STR, nullable=False),
        pa.field("candidate_patches", STR_LIST),
    ),
    "preference": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("chosen", STR, nullable=False),
        pa.field("rejected", STR, nullable=False),
    ),
    # Cascade 2 multi-domain RL (rewards/multi_domain.py). MCQA: the prompt lists the options,
    # `answer` is the correct letter.
    "mcqa": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("answer", STR, nullable=False),
    ),
    # json_schema: the JSON Schema (a JSON string) the response must validate against.
    "structured_output": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("json_schema", STR, nullable=False),
    ),
    # tools: JSON list of signatures (rendered in the system turn); reference_call: JSON
    # {"name", "arguments"} the emitted <tool_call> must match.
    "tool_call": _schema(
        pa.field("prompt", STR, nullable=False),
        pa.field("tools", STR, nullable=False),
        pa.field("reference_call", STR, nullable=False),
    ),
}

# Formatted SFT rows (output of chat formatting, input of the SFT trainer).
SFT_SCHEMA = pa.schema(
    [
        pa.field("row_id", STR, nullable=False),
        pa.field("source", STR, nullable=False),
        pa.field("domain", STR, nullable=False),
        pa.field("mode", STR, nullable=False),  # "think" | "no_think"
        pa.field("messages", STR, nullable=False),  # JSON [{"role", "content"}], suffixes applied
        pa.field("text", STR, nullable=False),  # the full ChatML rendering
    ]
)

# RL prompt sets: the columns every verifier reads (absent ones are null).
RL_SCHEMA = pa.schema(
    [
        pa.field("row_id", STR, nullable=False),
        pa.field("source", STR, nullable=False),
        pa.field("domain", STR, nullable=False),
        pa.field("mode", STR, nullable=False),  # "think" | "no_think"
        pa.field("prompt", STR, nullable=False),  # the user message, without mode suffix
        pa.field("answer", STR),
        pa.field("tests", STR),
        pa.field("instruction_id_list", STR_LIST),
        pa.field("kwargs", STR),
        pa.field("golden_patch", STR),
        pa.field("code_context", STR),
        pa.field("json_schema", STR),  # structured_output rows
        pa.field("tools", STR),  # tool_call rows (rendered into the prompt's system turn)
        pa.field("reference_call", STR),  # tool_call rows
    ]
)


def required_fields(domain: str) -> list[str]:
    """Canonical fields a row of `domain` must have (non-null, non-empty)."""
    return [f.name for f in DOMAIN_SCHEMAS[domain] if not f.nullable and f.name not in ("row_id", "source")]


@dataclass(frozen=True)
class SourceTable:
    """One curated canonical table and where it came from (input of blends and prompt sets)."""

    name: str
    """Source name (rows keep their own `source` column)."""
    domain: str
    """Canonical domain of the table (a DOMAIN_SCHEMAS key)."""
    table: pa.Table
    """Curated canonical rows (after quarantine, decontamination and dedup)."""
