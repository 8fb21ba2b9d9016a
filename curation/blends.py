"""SFT stage blends: several canonical source tables -> one formatted SFT corpus.

Steps, in order (each drop is counted under its reason):
1. SWE sources go through the paper's split (docs/cascade_rl.md#swe-data-split,
   `curation.swe.split_swe`); only the SFT side
   stays (`swe_to_rl` counts instances routed to RL, `swe:<reason>` the split's drops).
2. Cross-source exact dedup of whole examples (`curation.text.normalize` of the system prompt,
   prompt and responses, `curation.dedup_params.EXAMPLE_FIELDS`): the first source in the
   stage's order wins (`duplicate_example`); several responses to one prompt all stay. A
   source's `max_responses_per_prompt` keeps its first N examples per normalised prompt
   (`over_responses_per_prompt`).
3. Chat formatting (`curation.chat.sft_rows`): parallel responses -> two rows; malformed
   responses dropped with chat's reasons.
4. Per-domain minimum response length in policy tokens (`short_answer`, docs/cascade_rl.md#sft-stages: stage 2
   drops short math answers) and the stage's token cap on the whole rendered text
   (`over_max_tokens`), both measured by `count_tokens` (the policy tokenizer in the
   asset layer; any `list[str] -> list[int]` in tests).
5. Per-domain upsampling: factor f keeps floor(f) copies of every row plus one more with
   probability frac(f) (a seeded draw per row, so deterministic); f < 1 subsamples and the
   rows left out are dropped as `downsampled`.
6. Deterministic shuffle by seed.

Row accounting. The unit is the candidate SFT row (one per present think / no-think
response; a canonical row without responses is one candidate). Upsampled copies are
counted as rows *added* to the input, so
`rows_in = candidates + added == rows_out + Σ dropped` holds exactly; `added` is reported
per domain.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from curation.accounting import RowAccount
from curation.chat import MODES, sft_rows
from curation.dedup_params import EXAMPLE_FIELDS
from curation.schemas import SFT_SCHEMA, SourceTable
from curation.swe import SweSplitConfig, split_swe, swe_chat_rows
from curation.text import normalize
from spec.train import DEFAULT_SYSTEM

TokenCounter = Callable[[list[str]], list[int]]


BlendSource = SourceTable
"""One canonical source table of a blend."""


@dataclass(frozen=True)
class BlendConfig:
    """Settings of one SFT stage blend."""

    upsample: Mapping[str, float] = field(default_factory=dict)
    """Per-domain upsampling factor (docs/cascade_rl.md#sft-stages, stage 2: science 2, swe 3); < 1 subsamples."""
    max_tokens: int | None = None
    """Drop rows whose rendered text exceeds this many policy tokens (None: no cap)."""
    min_answer_tokens: Mapping[str, int] = field(default_factory=dict)
    """Per-domain minimum assistant-response length in policy tokens."""
    seed: int = 0
    """Seed of the fractional upsampling draws and of the final shuffle."""
    system: str = DEFAULT_SYSTEM
    """System prompt of every rendered row."""
    modes: Sequence[str] = MODES
    """Reasoning modes whose responses become rows."""
    swe: SweSplitConfig = SweSplitConfig()
    """SFT/RL split rule applied to SWE sources."""
    max_responses_per_prompt: Mapping[str, int] = field(default_factory=dict)
    """Source name -> most examples kept per normalised prompt (absent: no cap)."""

    @classmethod
    def from_recipe(cls, stage: Any, swe: Any | None = None, seed: int = 0,
                    max_responses_per_prompt: Mapping[str, int] | None = None) -> "BlendConfig":
        """From a recipe SFT stage (`upsample`, `max_tokens`, `min_answer_tokens`), `curation.swe` and
        the sources' `max_responses_per_prompt`."""
        return cls(upsample=dict(stage.upsample), max_tokens=stage.max_tokens,
                   min_answer_tokens=dict(stage.min_answer_tokens), seed=seed, swe=SweSplitConfig.from_recipe(swe),
                   max_responses_per_prompt=dict(max_responses_per_prompt or {}))


@dataclass
class BlendResult:
    """The blended corpus and its accounting."""

    table: pa.Table
    """SFT rows (curation.schemas.SFT_SCHEMA), shuffled."""
    dropped: dict[str, int]
    """Reason -> number of candidate rows dropped."""
    rows_in: int
    """Candidates + upsampled copies; equals table.num_rows + sum(dropped.values())."""
    added: dict[str, int]
    """Domain -> upsampled copies added."""


def _candidates(row: dict[str, Any], modes: Sequence[str]) -> int:
    return max(1, sum(1 for m in modes if row.get(f"{m}_response")))


def _final_content(messages_json: str) -> str:
    import json

    return json.loads(messages_json)[-1]["content"]


def blend(sources: Sequence[BlendSource], config: BlendConfig = BlendConfig(),
          count_tokens: TokenCounter | None = None) -> BlendResult:
    """Blend canonical source tables into one SFT corpus (see the module docstring)."""
    if (config.max_tokens or config.min_answer_tokens) and count_tokens is None:
        raise ValueError("token caps need count_tokens (the policy tokenizer)")
    account = RowAccount()
    added: dict[str, int] = {}
    candidates = 0
    seen: set[str] = set()
    formatted: list[tuple[str, pa.Table]] = []
    for src in sources:
        if src.domain == "swe":
            split = split_swe(src.table, config.swe)
            candidates += split.rows_in
            for reason, n in split.dropped.items():
                account.drop(f"swe:{reason}", n)
            account.drop("swe_to_rl", split.rl.num_rows)
            rows = swe_chat_rows(split.sft)
        else:
            rows = src.table.to_pylist()
            candidates += sum(_candidates(r, config.modes) for r in rows)
        unique = []
        cap, per_prompt = config.max_responses_per_prompt.get(src.name), {}
        for row in rows:
            key = normalize("\n".join(row.get(f) or "" for f in EXAMPLE_FIELDS))
            if key in seen:
                account.drop("duplicate_example", _candidates(row, config.modes))
                continue
            seen.add(key)
            if cap is not None:
                prompt = normalize(row["prompt"])
                per_prompt[prompt] = per_prompt.get(prompt, 0) + 1
                if per_prompt[prompt] > cap:
                    account.drop("over_responses_per_prompt", _candidates(row, config.modes))
                    continue
            unique.append(row)
        table, reasons = sft_rows(unique, src.domain, config.system, config.modes)
        for reason, n in reasons.items():
            account.drop(reason, n)
        formatted.append((src.domain, table))

    kept: list[dict[str, Any]] = []
    for domain, table in formatted:
        rows = table.to_pylist()
        min_tokens = config.min_answer_tokens.get(domain)
        if min_tokens and rows:
            lengths = count_tokens([_final_content(r["messages"]) for r in rows])
            short = [r for r, n in zip(rows, lengths) if n < min_tokens]
            account.drop("short_answer", len(short))
            rows = [r for r, n in zip(rows, lengths) if n >= min_tokens]
        if config.max_tokens and rows:
            lengths = count_tokens([r["text"] for r in rows])
            account.drop("over_max_tokens", sum(n > config.max_tokens for n in lengths))
            rows = [r for r, n in zip(rows, lengths) if n <= config.max_tokens]
        kept.extend(_upsample(rows, domain, config, account, added))

    random.Random(f"blend-shuffle:{config.seed}").shuffle(kept)
    account.rows_in = candidates + sum(added.values())
    return BlendResult(pa.Table.from_pylist(kept, schema=SFT_SCHEMA), account.check(len(kept), "blend"),
                       account.rows_in, added)


def blend_sft(tables: Mapping[str, tuple[str, pa.Table]], config: BlendConfig = BlendConfig(),
              count_tokens: TokenCounter | None = None) -> BlendResult:
    """`blend` over {source name: (domain, table)}, in the mapping's (the stage's) order."""
    return blend([BlendSource(name, domain, table) for name, (domain, table) in tables.items()], config, count_tokens)


def _upsample(rows: list[dict[str, Any]], domain: str, config: BlendConfig,
              account: RowAccount, added: dict[str, int]) -> list[dict[str, Any]]:
    factor = float(config.upsample.get(domain, 1.0))
    if factor == 1.0:
        return rows
    if factor < 0:
        raise ValueError(f"upsample factor for {domain!r} must be >= 0, got {factor}")
    whole, frac = math.floor(factor), factor - math.floor(factor)
    out = []
    for row in rows:
        # A per-row draw keyed by row_id: the same row gets the same decision on any run.
        extra = random.Random(f"upsample:{config.seed}:{row['row_id']}").random() < frac
        copies = whole + extra
        if copies == 0:
            account.drop("downsampled")
            continue
        out.append(row)
        for k in range(1, copies):
            out.append(dict(row, row_id=f"{row['row_id']}~{k}"))
        if copies > 1:
            added[domain] = added.get(domain, 0) + copies - 1
    return out
