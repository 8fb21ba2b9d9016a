"""SWE instance curation: patch filtering, benchmark-repo exclusion, dedup and the SFT/RL split.

The paper's rule (docs/cascade_rl.md#swe-data-split): every teacher patch is scored
against the golden patch with the SWE-RL
lexical similarity (`curation.patches`). An instance with at least `min_good_for_sft` of
its `samples` candidates above `similarity_threshold` is easy enough for the teacher to be
imitated: it goes to SFT with its best candidate as the response. An instance with fewer
good candidates but at least one non-zero similarity is learnable but hard: it goes to RL.
All-zero instances carry no signal and are dropped.

Instance-level drop reasons (row accounting: instances in = sft + rl + Σ dropped):
`benchmark_repo`, `golden_unparsable` / `golden_empty` / `golden_binary_only` /
`golden_noop`, `duplicate_instance` (same repo + base commit; first kept),
`no_candidates`, `no_signal`. Unusable candidates (`unparsable`, `empty`, `binary_only`)
are filtered per candidate and reported separately in `candidates_dropped`; they score 0.

SFT and RL use one prompt text (`swe_prompt`) and one response format (`swe_response`),
so the policy is trained and prompted the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import pyarrow as pa

from curation.patches import ParsedPatch, lexical_similarity, patch_is_noop, similarity_upper_bound, try_parse_patch
from curation.schemas import DOMAIN_SCHEMAS


@dataclass(frozen=True)
class SweSplitConfig:
    """Settings of the SWE SFT/RL split (mirrors the recipe's `curation.swe`)."""

    similarity_threshold: float = 0.5
    """A candidate is 'good' when its lexical similarity to the golden patch exceeds this."""
    samples: int = 8
    """Candidates considered per instance (the first `samples` of `candidate_patches`)."""
    min_good_for_sft: int = 4
    """At least this many good candidates -> SFT; fewer but one non-zero -> RL."""
    exclude_repos: Sequence[str] = ()
    """Benchmark repositories (e.g. SWE-bench Verified's) excluded entirely."""

    @classmethod
    def from_recipe(cls, swe: Any | None) -> "SweSplitConfig":
        """From the recipe's `curation.swe` section (any object with the same attributes)."""
        if swe is None:
            return cls()
        return cls(swe.similarity_threshold, swe.samples, swe.min_good_for_sft, tuple(swe.exclude_repos))


@dataclass
class SweSplit:
    """Result of `split_swe`: canonical SWE tables for each side plus accounting."""

    sft: pa.Table
    """SFT instances: the SWE schema plus `best_patch` and `good` (count of good candidates)."""
    rl: pa.Table
    """RL instances: the SWE schema plus `good`."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Instance-level drop reasons -> count."""
    candidates_dropped: dict[str, int] = field(default_factory=dict)
    """Unusable candidate patches by reason (they count as similarity 0)."""
    rows_in: int = 0
    """Instances read; rows_in == sft.num_rows + rl.num_rows + sum(dropped.values())."""


SWE_SCHEMA = DOMAIN_SCHEMAS["swe"]
SWE_RL_SCHEMA = SWE_SCHEMA.append(pa.field("good", pa.int64()))
SWE_SFT_SCHEMA = SWE_RL_SCHEMA.append(pa.field("best_patch", pa.string()))


def swe_prompt(issue: str, code_context: str) -> str:
    """The user message of a SWE task (SFT and RL alike)."""
    return (
        f"Fix the following issue in the repository.\n\nIssue:\n{issue.strip()}\n\n"
        f"Relevant code:\n{code_context.rstrip()}\n\n"
        "Answer with a unified diff (--- a/path, +++ b/path) in a ```diff block."
    )


def swe_response(patch: str) -> str:
    """The assistant answer of a SWE task: the patch in a diff fence."""
    return f"```diff\n{patch.rstrip()}\n```"


def _score(candidates: list[ParsedPatch], golden: ParsedPatch, threshold: float) -> tuple[int, bool, int]:
    """(good count, any non-zero, index of best) — difflib runs only where the bound exceeds threshold."""
    good, nonzero, best, best_i = 0, False, -1.0, -1
    for i, cand in enumerate(candidates):
        bound = similarity_upper_bound(cand, golden)
        if bound == 0.0:
            continue  # exact: no common character with the golden patch
        nonzero = True
        if bound <= threshold:
            continue  # cannot be good, and cannot be the best of an SFT instance
        sim = lexical_similarity(cand, golden)
        good += sim > threshold
        if sim > best:
            best, best_i = sim, i
    return good, nonzero, best_i


def split_swe(rows: pa.Table | Iterable[dict[str, Any]], config: SweSplitConfig = SweSplitConfig()) -> SweSplit:
    """Filter, dedup and split canonical SWE instances into SFT and RL sets."""
    records = rows.to_pylist() if isinstance(rows, pa.Table) else list(rows)
    excluded = {r.lower() for r in config.exclude_repos}
    seen: set[tuple[str, str]] = set()
    sft, rl = [], []
    dropped: dict[str, int] = {}
    cand_dropped: dict[str, int] = {}

    def drop(reason: str) -> None:
        dropped[reason] = dropped.get(reason, 0) + 1

    for row in records:
        if row["repo"].lower() in excluded:
            drop("benchmark_repo")
            continue
        golden, reason = try_parse_patch(row["golden_patch"])
        if golden is None:
            drop(f"golden_{reason}")
            continue
        if patch_is_noop(row["golden_patch"]):
            drop("golden_noop")
            continue
        key = (row["repo"], row["base_commit"])
        if key in seen:
            drop("duplicate_instance")
            continue
        seen.add(key)
        texts = list(row.get("candidate_patches") or [])[: config.samples]
        if not texts:
            drop("no_candidates")
            continue
        parsed, kept_texts = [], []
        for text in texts:
            cand, why = try_parse_patch(text)
            if cand is None:
                cand_dropped[why] = cand_dropped.get(why, 0) + 1
            else:
                parsed.append(cand)
                kept_texts.append(text)
        good, nonzero, best_i = _score(parsed, golden, config.similarity_threshold)
        base = {f.name: row.get(f.name) for f in SWE_SCHEMA} | {"good": good}
        if good >= config.min_good_for_sft:
            sft.append(base | {"best_patch": kept_texts[best_i]})
        elif nonzero:
            rl.append(base)
        else:
            drop("no_signal")
    return SweSplit(
        sft=pa.Table.from_pylist(sft, schema=SWE_SFT_SCHEMA),
        rl=pa.Table.from_pylist(rl, schema=SWE_RL_SCHEMA),
        dropped=dropped,
        candidates_dropped=cand_dropped,
        rows_in=len(records),
    )


def swe_chat_rows(sft: pa.Table) -> list[dict[str, Any]]:
    """SFT instances as chat-like canonical rows (prompt + no-think response) for `sft_rows`.

    The teacher patches carry no reasoning, so SWE SFT rows are non-thinking only.
    """
    return [
        {
            "row_id": r["row_id"],
            "source": r["source"],
            "prompt": swe_prompt(r["issue"], r["code_context"]),
            "think_response": None,
            "no_think_response": swe_response(r["best_patch"]),
        }
        for r in sft.to_pylist()
    ]
