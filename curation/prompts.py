"""RL prompt sets per stage, carrying the columns their verifiers read (RL_SCHEMA).

Per stage kind (the recipe's `rl_stages[].kind`; source domains and required columns come from
the stage-kind registry, `spec.kinds`):
- rlhf: chat or preference prompts (`prompt`; multi-turn prompts stay JSON turns);
- if: `prompt`, `instruction_id_list`, `kwargs`;
- math: `prompt`, `answer` (math or science rows);
- code: `prompt`, `tests`;
- swe: SWE instances split by the paper's rule (docs/cascade_rl.md#swe-data-split, `curation.swe`); the RL side becomes
  `prompt` (issue + code context, `curation.swe.swe_prompt`), `golden_patch`, `code_context`.

Disjointness follows the data flow: a prompt that appears in any SFT corpus of the
recipe (`overlaps_sft`) or in the prompt set of an EARLIER RL stage
(`overlaps_rl:<stage>`) is dropped, by normalised text (`curation.text.normalize` of the
final user message, mode suffix removed). Hence no RL prompt is an SFT prompt and RL
stages do not overlap. Other drop reasons: `missing_<column>`, `duplicate_prompt`,
`swe_to_sft`, `swe:<reason>`, `over_cap` (beyond `max_prompts`).

Modes: after a seeded shuffle, rows get `modes[i % len(modes)]`, so every batch of
consecutive prompts is half thinking, half non-thinking (docs/cascade_rl.md#hyperparameters-per-stage: RLHF batches).

Accounting: rows_in = input rows = rows_out + Σ dropped.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa

from curation.chat import MODE_SUFFIX, MODES, parse_conversation
from curation.schemas import RL_SCHEMA, SourceTable
from curation.swe import SweSplitConfig, split_swe, swe_prompt
from curation.text import normalize
from spec.kinds import stage_kind

_RL_COLUMNS = [f.name for f in RL_SCHEMA]


PromptSource = SourceTable
"""One canonical source table feeding a stage's prompt set."""


@dataclass(frozen=True)
class PromptSetConfig:
    """Settings of one RL stage's prompt set."""

    kind: str
    """A registered RL stage kind (spec.kinds): rlhf | if | math | code | swe | ..."""
    modes: Sequence[str] = MODES
    """Reasoning modes assigned alternately (one mode: every prompt gets it)."""
    max_prompts: int | None = None
    """Keep at most this many prompts (after the shuffle); the rest are `over_cap`."""
    seed: int = 0
    """Seed of the shuffle that orders prompts and assigns modes."""
    swe: SweSplitConfig = SweSplitConfig()
    """SFT/RL split rule for SWE sources."""
    stage: str = ""
    """Stage name (seeds the shuffle; defaults to `kind`)."""

    @classmethod
    def from_recipe(cls, stage: Any, swe: Any | None = None, seed: int = 0) -> "PromptSetConfig":
        """From a recipe RL stage (`name`, `kind`, `modes`, `max_prompts`) and `curation.swe`."""
        return cls(kind=stage.kind, modes=tuple(stage.modes), max_prompts=stage.max_prompts, seed=seed,
                   swe=SweSplitConfig.from_recipe(swe), stage=stage.name)


@dataclass
class PromptSetResult:
    """A stage's prompt set and its accounting."""

    table: pa.Table
    """RL_SCHEMA rows in training order."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Reason -> rows dropped."""
    rows_in: int = 0
    """Input rows; rows_in == table.num_rows + sum(dropped.values())."""


def prompt_key(prompt: str) -> str:
    """Normalised final user message (mode suffix removed): the overlap key."""
    turns = parse_conversation(prompt)
    users = [t["content"] for t in turns or [] if t["role"] == "user"]  # a tool turn may end the prompt
    text = users[-1] if users else prompt
    for suffix in MODE_SUFFIX.values():
        text = text.removesuffix(suffix)
    return normalize(text)


def sft_prompt_keys(sft_tables: Iterable[pa.Table]) -> set[str]:
    """Overlap keys of every user prompt in SFT corpora (SFT_SCHEMA `messages`)."""
    keys = set()
    for table in sft_tables:
        for messages in table.column("messages").to_pylist():
            users = [m["content"] for m in json.loads(messages) if m["role"] == "user"]
            if users:
                keys.add(prompt_key(users[-1]))
    return keys


def rl_columns(row: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """Canonical row -> RL_SCHEMA columns (without `mode`); also used for eval sets."""
    out = {c: None for c in _RL_COLUMNS} | {"row_id": row["row_id"], "source": row["source"], "domain": domain}
    if domain == "swe":
        out |= {"prompt": swe_prompt(row["issue"], row["code_context"]), "golden_patch": row["golden_patch"],
                "code_context": row["code_context"]}
    else:
        out["prompt"] = row.get("prompt")
        for col in ("answer", "tests", "instruction_id_list", "kwargs", "json_schema", "tools", "reference_call"):
            if row.get(col) is not None:
                out[col] = row[col]
    return out


def rl_prompt_set(
    tables: Mapping[str, tuple[str, pa.Table]],
    config: PromptSetConfig,
    exclude_sft: Iterable[pa.Table] = (),
    exclude_rl: Mapping[str, pa.Table] | None = None,
) -> PromptSetResult:
    """`build_prompt_set` over {source: (domain, table)}, excluding SFT corpora (SFT_SCHEMA
    tables) and earlier stages' prompt sets ({stage: RL_SCHEMA table}, cascade order)."""
    sources = [PromptSource(name, domain, table) for name, (domain, table) in tables.items()]
    return build_prompt_set(config.stage or config.kind, sources, config, sft_prompt_keys(exclude_sft), exclude_rl)


def eval_rows(table: pa.Table, kind: str, name: str = "eval", modes: Sequence[str] = MODES,
              domain: str | None = None) -> pa.Table:
    """A held-out canonical table (benchmark asset) -> RL_SCHEMA rows in input order.

    Nothing is filtered (eval sets are decontamination targets, not corpora); `mode`
    alternates like a prompt set, and evaluators that run every mode ignore it. `domain` is the
    eval set's declared domain (the benchmark's `domain:`), one of the kind's source domains, so
    each eval set of a multi-domain kind carries its own; None = the kind's first source domain.
    """
    domains = stage_kind(kind).source_domains
    domain = domain or domains[0]
    if domain not in domains:
        raise ValueError(f"eval set {name}: domain {domain!r} is not one of kind {kind!r}'s domains {list(domains)}")
    rows = []
    for i, row in enumerate(table.to_pylist()):
        row.setdefault("row_id", f"{name}-{i}")
        row.setdefault("source", name)
        rows.append(rl_columns(row, domain) | {"mode": modes[i % len(modes)]})
    return pa.Table.from_pylist(rows, schema=RL_SCHEMA)


def build_prompt_set(
    stage: str,
    sources: Sequence[PromptSource],
    config: PromptSetConfig,
    sft_keys: set[str] | None = None,
    earlier: Mapping[str, pa.Table] | None = None,
) -> PromptSetResult:
    """Build `stage`'s prompt set from its sources (see the module docstring).

    `sft_keys`: `sft_prompt_keys` of every SFT corpus of the recipe. `earlier`: earlier
    RL stages' prompt sets by stage name, in cascade order.
    """
    kind = stage_kind(config.kind)  # raises for an unregistered kind
    domains, needed = kind.source_domains, kind.prompt_columns
    earlier_keys = [(name, {prompt_key(p) for p in t.column("prompt").to_pylist()}) for name, t in (earlier or {}).items()]
    sft_keys = sft_keys or set()
    dropped: dict[str, int] = {}
    rows_in = 0
    seen: set[str] = set()
    kept: list[dict[str, Any]] = []

    def drop(reason: str, n: int = 1) -> None:
        if n:
            dropped[reason] = dropped.get(reason, 0) + n

    for src in sources:
        if src.domain not in domains:
            raise ValueError(f"{stage}: source {src.name!r} has domain {src.domain!r}; a {config.kind!r} stage takes {sorted(domains)}")
        rows_in += src.table.num_rows
        if src.domain == "swe":
            split = split_swe(src.table, config.swe)
            for reason, n in split.dropped.items():
                drop(f"swe:{reason}", n)
            drop("swe_to_sft", split.sft.num_rows)
            rows = split.rl.to_pylist()
        else:
            rows = src.table.to_pylist()
        for row in rows:
            rl = rl_columns(row, src.domain)
            missing = next((c for c in ("prompt",) + needed if not rl.get(c)), None)
            if missing:
                drop(f"missing_{missing}")
                continue
            key = prompt_key(rl["prompt"])
            if key in sft_keys:
                drop("overlaps_sft")
                continue
            hit = next((name for name, keys in earlier_keys if key in keys), None)
            if hit:
                drop(f"overlaps_rl:{hit}")
                continue
            if key in seen:
                drop("duplicate_prompt")
                continue
            seen.add(key)
            kept.append(rl)

    random.Random(f"prompts:{stage}:{config.seed}").shuffle(kept)
    if config.max_prompts is not None and len(kept) > config.max_prompts:
        drop("over_cap", len(kept) - config.max_prompts)
        kept = kept[: config.max_prompts]
    for i, row in enumerate(kept):
        row["mode"] = config.modes[i % len(config.modes)]
    return PromptSetResult(pa.Table.from_pylist(kept, schema=RL_SCHEMA), dropped, rows_in)
