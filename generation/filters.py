"""What teacher samples become: SFT rows by rejection, RL prompts by pass rate, SWE candidates.

Each filter consumes the `GenRecord` stream of `generation.pipeline.generate_rows` (records of
one row arrive together) and keeps only its output, so filtering never holds the samples.
Filtering is separate from generation on purpose: changing the verifier or its threshold
re-runs a filter over the same cached samples with zero new generation.

- `rejection_sample` (SFT): per response, in this order: `prompt_too_long`, `truncated`
  (finish_reason `length`), the format problems of curation.chat.response_problem
  (`bad_think_block`, `think_in_no_think`; `empty_answer` is reported as `no_final_answer`),
  `bad_tool_call` (tool rows), then the verifier: `verifier_failed` (score below threshold,
  the verifier's own reasons sub-counted in `verifier_reasons`) or `verifier_error` (the
  verifier itself failed), then `over_quota` (beyond `max_per_prompt` kept per row and mode).
  Kept responses become canonical rows of the source's domain. responses_in = kept + Σ dropped.
- `pass_rate_filter` (RL): k verified samples per prompt; keep prompts whose pass rate is in
  the band (`pass_rate_zero`, `pass_rate_too_low`, `pass_rate_too_high`, `prompt_too_long`,
  `verifier_error`), with a `pass_rate` column. rows_in = kept + Σ dropped.
- `swe_patch_sample`: the patch of each sampled response (rewards.swe.extract_patch, parsed
  by curation.patches) goes into its instance's `candidate_patches`; unusable ones are
  counted (`unparsable_patch`, `empty_patch`, `binary_only_patch`, `truncated`,
  `prompt_too_long`). Every instance is kept: curation.swe.split_swe sorts them into SFT and RL.

Every result carries `data_version` (curation.versioning.content_hash of its table) and the
generation counts of the run that fed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import pyarrow as pa

from curation.chat import response_problem, tool_call_problem
from curation.content_hash import content_hash
from curation.patches import try_parse_patch
from curation.schemas import DOMAIN_SCHEMAS
from generation.pipeline import PROMPT_TOO_LONG, GenerationStats, GenRecord, row_prompt
from rewards.base import RewardResult
from rewards.cache import cache_path, maybe_cached
from rewards.registry import REWARDS, get_reward, reward_version
from rewards.swe import extract_patch

_NOT_REWARD_COLUMNS = {"prompt", "think_response", "no_think_response", "mode"}
_VERIFIER_DROPS = ("verifier_failed", "verifier_error")


@dataclass
class Verifier:
    """A reward with a pass threshold: `score >= threshold` passes."""

    reward: Any
    """A Reward (its `score` gives reasons) or a TRL-style function returning floats."""
    name: str = "reward"
    threshold: float = 1.0
    columns: tuple[str, ...] | None = None
    """Row columns handed to the reward; None: every column of the row but prompt/responses."""

    @classmethod
    def from_registry(cls, name: str, threshold: float = 1.0, reward_cache: str | Path | None = "off",
                      **options: Any) -> "Verifier":
        """A registry reward (`get_reward(name, **options)`), fed the columns REWARDS declares.

        `reward_cache`: rewards.cache setting (None: `$CASCADE_HOME/reward_cache.sqlite`; "off": none),
        so re-filtering the same samples with the same verifier does not re-score them.
        """
        entry = REWARDS.get(name)
        columns = entry.columns + entry.optional_columns if entry else None
        reward = maybe_cached(get_reward(name, **options), cache_path(reward_cache))
        return cls(reward, name, threshold, columns)

    @property
    def version(self) -> str:
        return reward_version(self.reward)

    def score(self, records: Sequence[GenRecord]) -> list[RewardResult]:
        """One result per record (one reward call for the whole list)."""
        if not records:
            return []
        names = self.columns if self.columns is not None else sorted(
            {c for r in records for c in r.row} - _NOT_REWARD_COLUMNS)
        columns = {c: [r.row.get(c) for r in records] for c in names}
        prompts, completions = [row_prompt(r.row) for r in records], [r.response or "" for r in records]
        if hasattr(self.reward, "score"):
            return list(self.reward.score(prompts, completions, **columns))
        return [RewardResult(None if s is None else float(s), "scored") for s in self.reward(prompts, completions, **columns)]

    def passes(self, result: RewardResult) -> bool:
        return result.score is not None and not result.infra_error and result.score >= self.threshold

    def close(self) -> None:
        """Release the reward's workers (a cached reward's inner one too)."""
        for obj in (self.reward, getattr(self.reward, "inner", None)):
            close = getattr(obj, "close", None)
            if callable(close):
                close()


@dataclass
class Judged:
    """A record and what became of it."""

    record: GenRecord
    dropped: str | None
    """Drop reason, None when kept."""
    result: RewardResult | None = None
    """The verifier's result, when it was asked."""


def format_problem(record: GenRecord, domain: str | None = None) -> str | None:
    """Why a response cannot be an SFT target before any verifier runs, else None."""
    if record.problem:
        return record.problem
    if record.finish_reason == "length":
        return "truncated"
    problem = response_problem(record.response or "", record.mode)
    if problem:
        return "no_final_answer" if problem == "empty_answer" else problem
    if domain == "tool" and record.row.get("tools"):
        return tool_call_problem(record.response or "", record.row["tools"])
    return None


def judge_records(records: Iterable[GenRecord], verifier: Verifier | None = None, domain: str | None = None,
                  max_per_prompt: int | None = None, checks: bool = True, chunk: int = 256) -> Iterator[Judged]:
    """The rejection rules over a record stream (module doc), verifying `chunk` records per reward call."""
    buffer: list[tuple[GenRecord, str | None]] = []
    quota: tuple[int, dict[str, int]] = (-1, {})

    def flush() -> Iterator[Judged]:
        nonlocal quota
        todo = [r for r, p in buffer if p is None]
        results = iter(verifier.score(todo)) if verifier is not None else iter(())
        for record, problem in buffer:
            result = next(results) if problem is None and verifier is not None else None
            if problem is None and result is not None and not verifier.passes(result):
                problem = "verifier_error" if result.infra_error else "verifier_failed"
            if problem is None and max_per_prompt is not None:
                if quota[0] != record.index:
                    quota = (record.index, {})
                kept = quota[1].get(record.mode, 0)
                problem = "over_quota" if kept >= max_per_prompt else None
                quota[1][record.mode] = kept + (problem is None)
            yield Judged(record, problem, result)
        buffer.clear()

    for record in records:
        problem = format_problem(record, domain) if checks else record.problem
        buffer.append((record, problem))
        if len(buffer) >= chunk:
            yield from flush()
    yield from flush()


def _bump(counts: dict[str, int], reason: str, n: int = 1) -> None:
    counts[reason] = counts.get(reason, 0) + n


@dataclass
class FilterResult:
    """A filter's output table and its accounting."""

    table: pa.Table
    dropped: dict[str, int] = field(default_factory=dict)
    """Reason -> count (of responses, prompts or patches: see each filter)."""
    items_in: int = 0
    """Units counted in: items_in == kept + sum(dropped.values())."""
    kept: int = 0
    stats: GenerationStats | None = None
    """Generation counts of the run that fed the filter."""
    verifier_reasons: dict[str, int] = field(default_factory=dict)
    """Verifier reasons of the `verifier_failed` / `verifier_error` drops."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def data_version(self) -> str:
        return content_hash(self.table)

    def summary(self) -> dict[str, Any]:
        """{rows, generated, cached, kept, dropped, tokens_generated, data_version, ...}."""
        gen = self.stats.as_dict() if self.stats is not None else {}
        return {**gen, "items_in": self.items_in, "kept": self.kept, "dropped": dict(sorted(self.dropped.items())),
                "verifier_reasons": dict(sorted(self.verifier_reasons.items())), **self.extra,
                "data_version": self.data_version}


def rejection_sample(records: Iterable[GenRecord], domain: str, verifier: Verifier | None = None,
                     max_per_prompt: int = 1, source: str | None = None,
                     stats: GenerationStats | None = None) -> FilterResult:
    """Kept responses as canonical `domain` rows (one per response; row_id `<row_id>-<mode>-s<sample>`).

    Counts responses; `extra["rows_without_kept"]` counts input rows with no response kept.
    `source`: the output rows' `source` (default: each input row's own).
    """
    if domain not in DOMAIN_SCHEMAS or "think_response" not in DOMAIN_SCHEMAS[domain].names:
        raise ValueError(f"rejection sampling makes prompt/response rows; domain {domain!r} has none")
    schema = DOMAIN_SCHEMAS[domain]
    names = schema.names
    out, dropped, reasons = [], {}, {}
    responses = rows_seen = rows_none = 0
    current, current_kept = -1, 0
    for judged in judge_records(records, verifier, domain, max_per_prompt):
        rec = judged.record
        if rec.index != current:
            rows_none += current >= 0 and current_kept == 0
            current, current_kept, rows_seen = rec.index, 0, rows_seen + 1
        responses += 1
        if judged.dropped:
            _bump(dropped, judged.dropped)
            if judged.dropped in _VERIFIER_DROPS:
                _bump(reasons, judged.result.reason)
            continue
        current_kept += 1
        row = {name: rec.row.get(name) for name in names}
        row |= {"row_id": f"{rec.row_id}-{rec.mode}-s{rec.sample}", "source": source or rec.row.get("source") or "generated",
                "think_response": None, "no_think_response": None, f"{rec.mode}_response": rec.response}
        out.append(row)
    rows_none += current >= 0 and current_kept == 0
    table = pa.Table.from_pylist(out, schema=schema)
    return FilterResult(table, dropped, responses, len(out), stats, reasons,
                        {"rows_in": rows_seen, "rows_without_kept": rows_none})


@dataclass(frozen=True)
class PassRateBand:
    """Which pass rates an RL prompt may have (inclusive bounds)."""

    min_rate: float = 0.0
    max_rate: float = 1.0
    drop_unsolved: bool = True
    """Drop prompts no sample solved (no learning signal)."""
    drop_solved: bool = True
    """Drop prompts every sample solved (nothing left to learn)."""

    def reason(self, rate: float) -> str | None:
        """Drop reason of a pass rate, None when inside the band."""
        if rate == 0.0 and (self.drop_unsolved or self.min_rate > 0):
            return "pass_rate_zero"
        if rate < self.min_rate:
            return "pass_rate_too_low"
        if (rate == 1.0 and self.drop_solved) or rate > self.max_rate:
            return "pass_rate_too_high"
        return None


def _grouped(records: Iterable[GenRecord]) -> Iterator[list[Any]]:
    group: list[Any] = []
    for item in records:
        rec = item.record if isinstance(item, Judged) else item
        if group and (group[0].record if isinstance(group[0], Judged) else group[0]).index != rec.index:
            yield group
            group = []
        group.append(item)
    if group:
        yield group


def pass_rate_filter(records: Iterable[GenRecord], verifier: Verifier, band: PassRateBand = PassRateBand(),
                     schema: pa.Schema | None = None, stats: GenerationStats | None = None) -> FilterResult:
    """Input rows whose pass rate (passing / verified samples) is in `band`, plus `pass_rate`.

    Every sample is verified as it is (no format checks). Counts prompts. `schema`: the input
    rows' schema (`pass_rate` is appended); inferred when None.
    """
    out, dropped, reasons, rows_in = [], {}, {}, 0
    rates: list[float] = []  # one float per prompt: small next to the output rows
    for group in _grouped(judge_records(records, verifier, checks=False)):
        rows_in += 1
        row = group[0].record.row
        if any(j.record.problem for j in group):
            _bump(dropped, PROMPT_TOO_LONG)
            continue
        valid = [j for j in group if j.result is not None and not j.result.infra_error]
        for j in group:
            if j.dropped in _VERIFIER_DROPS:
                _bump(reasons, j.result.reason)
        if not valid:
            _bump(dropped, "verifier_error")
            continue
        rate = sum(verifier.passes(j.result) for j in valid) / len(valid)
        rates.append(rate)
        reason = band.reason(rate)
        if reason:
            _bump(dropped, reason)
        else:
            out.append({**row, "pass_rate": rate})
    out_schema = schema.append(pa.field("pass_rate", pa.float64())) if schema is not None else None
    table = pa.Table.from_pylist(out, schema=out_schema)
    histogram: dict[str, int] = {}
    for r in sorted(rates):
        _bump(histogram, f"{r:.3f}")
    return FilterResult(table, dropped, rows_in, len(out), stats, reasons,
                        {"rows_in": rows_in, "pass_rates": histogram})


def patch_problem(record: GenRecord) -> tuple[str | None, str | None]:
    """(patch, None) for a usable sampled patch, else (None, drop reason)."""
    if record.problem:
        return None, record.problem
    if record.finish_reason == "length":
        return None, "truncated"
    patch = extract_patch(record.response or "")
    if patch is None:
        return None, "unparsable_patch"
    parsed, why = try_parse_patch(patch)
    return (patch, None) if parsed is not None else (None, f"{why}_patch")


def swe_patch_sample(records: Iterable[GenRecord], keep_existing: bool = False,
                     stats: GenerationStats | None = None) -> FilterResult:
    """SWE instances with their sampled patches in `candidate_patches` (sample order).

    `keep_existing`: append after the row's own candidates instead of replacing them.
    Counts patches (items_in = sampled responses); every instance is output.
    """
    schema = DOMAIN_SCHEMAS["swe"]
    out, dropped, patches_in, kept = [], {}, 0, 0
    for group in _grouped(records):
        row = group[0].row
        patches = list(row.get("candidate_patches") or []) if keep_existing else []
        for rec in group:
            patches_in += 1
            patch, reason = patch_problem(rec)
            if reason:
                _bump(dropped, reason)
            else:
                patches.append(patch)
                kept += 1
        out.append({f.name: row.get(f.name) for f in schema} | {"candidate_patches": patches})
    table = pa.Table.from_pylist(out, schema=schema)
    return FilterResult(table, dropped, patches_in, kept, stats, {},
                        {"rows_in": len(out), "rows_without_patches": sum(1 for r in out if not r["candidate_patches"])})
