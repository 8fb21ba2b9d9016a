"""Every reason a row is quarantined or dropped, one line each: the registry the docs are made of.

What: `REASONS` lists each reason name the code counts under (`quarantine.parquet`'s `reason`, the
`dropped` counts of a lineage record, a filter's `dropped`), where it is counted (`STEPS`) and
what it means. A parametrised reason is one entry with a `<param>` in its name
(`missing_field:<field>` stands for `missing_field:messages`, `missing_field:prompt`, ...).
`describe(reason)` finds the entry of a concrete reason.

Why one registry: the reasons are raised where the rows are judged (curation/formats_chat.py,
curation/rows.py, curation/blends.py, generation/filters.py, ...), so a list written by hand
elsewhere rots. This list is the one source of docs/reasons.md (`python -m curation.reasons`
rewrites its generated section), and tests/curation/test_reasons.py scans the code for the
reason literals it emits and fails when one is missing here, or listed here and no longer emitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

STEPS: dict[str, str] = {
    "source": "`sources/raw_<s>`: rows quarantined while a source is read and mapped (`quarantine.parquet`, "
              "`line` = 1-based file line)",
    "clean": "`curated/clean_<s>`: decontamination and dedup (`decontam_dropped.json`, `dedup_dropped.parquet`); "
             "dedup of the reward model's `<rm>_data` too",
    "blend": "`corpora/<stage>_data`: an SFT stage's blend (curation.blends, its responses judged by curation.chat)",
    "swe": "the SWE SFT/RL split (curation.swe), counted as `swe:<reason>` by the blend or prompt set that ran it",
    "patch": "an unusable patch (curation.patches): the split's `candidates_dropped`, `golden_<reason>`, "
             "`<reason>_patch`",
    "prompts": "`corpora/<stage>_prompts`: an RL stage's prompt set (curation.prompts)",
    "generation": "`generations/<g>`: teacher samples through generation.filters (rejection, pass rate, patches)",
    "training": "an SFT stage's trainer (trainer.sft): formatted rows left with nothing to learn",
}
"""Step name -> where its counts are recorded."""


@dataclass(frozen=True)
class Reason:
    """One reason rows are quarantined or dropped for."""

    name: str
    """The reason, or its pattern with one `<param>` (`missing_field:<field>`)."""
    steps: tuple[str, ...]
    """The `STEPS` that count rows under it."""
    meaning: str
    """One line: what the row had (or lacked)."""

    def matches(self, reason: str) -> bool:
        """Whether the concrete `reason` is this one (a pattern's `<param>` stands for text without `:`)."""
        parts = re.split(r"<[^>]+>", self.name)
        return re.fullmatch("[^:]+".join(re.escape(p) for p in parts), reason) is not None


def _r(name: str, steps: str, meaning: str) -> Reason:
    return Reason(name, tuple(steps.split()), meaning)


REASONS: tuple[Reason, ...] = (
    # Reading a source (curation.sources readers, curation.formats layouts, curation.rows values)
    _r("invalid_json", "source", "a jsonl line that is not JSON"),
    _r("undecodable_text", "source", "bytes that are not UTF-8, or a string holding lone surrogates"),
    _r("not_an_object", "source", "a record that is not a JSON object"),
    _r("missing_field:<field>", "source", "a required field (or the key a layout reads, e.g. `messages`) is absent "
       "or null"),
    _r("empty_field:<field>", "source", "a required field is empty or blank"),
    _r("wrong_type:<field>", "source", "a value of the wrong type (a list where text is due, a message `content` "
       "that is neither text nor text parts, ...)"),
    _r("not_a_list:<field>", "source", "`messages`, `conversations`, `input` or `tool_calls` is not a list"),
    _r("not_in_domain:tools", "source", "the row declares tools but its domain has no `tools` column (only `tool` "
       "and `tool_call` have one)"),
    _r("bad_message", "source", "a turn that is not an object"),
    _r("bad_role:<role>", "source", "a turn whose role, after the layout's aliases, is not system, user, "
       "assistant or tool"),
    _r("non_text_content", "source", "a content part that is not text (an image, audio, ...)"),
    _r("bad_tools", "source", "`tools` that are not a JSON list of signatures with a `name`"),
    _r("bad_tool_call", "source blend generation", "a tool call that is not `{name, arguments}` with a JSON-object "
       "`arguments`; in a response also one naming an undeclared tool or with unpaired tags"),
    _r("double_reasoning", "source", "an assistant turn with both `reasoning_content` and think tags in its text"),
    _r("misplaced_think", "source", "think tags that do not open the assistant text"),
    _r("unterminated_think", "source", "a `<think>` never closed"),
    _r("extra_think_block", "source", "think tags after the first closed think block"),
    _r("bad_reasoning_flag", "source", "a `reasoning` switch that is not on/off or a boolean"),
    _r("missing_think", "source", "a `reasoning: on` row whose final answer has no think block"),
    _r("empty_think", "source", "a `reasoning: on` row whose think block is blank"),
    _r("think_in_no_think", "source blend generation", "reasoning in a non-thinking response (a `reasoning: off` "
       "row, or think tags in a /no_think response)"),
    _r("empty_content", "source", "a user or assistant turn, a final answer or a preference reply without text"),
    _r("misplaced_system_turn", "source", "a system turn after the conversation started"),
    _r("no_user_turn", "source", "no user turn before the final response"),
    _r("consecutive_assistant_turns", "source", "the turn before the final response is an assistant turn too"),
    _r("no_assistant_turn", "source", "a conversation (or a preference side) without an assistant turn"),
    _r("ends_with:<role>", "source", "a conversation whose last turn is a `<role>` turn, not the response"),
    _r("bad_transcript", "source", "an HH-RLHF transcript with text before its first `Human:` / `Assistant:`"),
    _r("prompt_mismatch", "source", "a preference pair whose chosen and rejected turns differ before the replies"),
    # Cleaning a source (curation.decontam, curation.dedup)
    _r("contaminated:<benchmark>", "clean", "shares an n-gram (`curation.decontam.ngram` words) with benchmark "
       "`<benchmark>`"),
    _r("exact_duplicate", "clean", "the same normalised text as an earlier row"),
    _r("near_duplicate", "clean", "MinHash Jaccard similarity at or above `curation.dedup.near.threshold` with an "
       "earlier row"),
    # An SFT blend (curation.blends, curation.chat)
    _r("duplicate_example", "blend", "the same whole example (system, prompt, responses) as an earlier row of the "
       "stage's sources"),
    _r("over_responses_per_prompt", "blend", "beyond the source's `max_responses_per_prompt` examples of one prompt"),
    _r("no_response", "blend", "a row with no response in the stage's modes"),
    _r("bad_think_block", "blend generation", "a thinking response without exactly one leading `<think>…</think>`"),
    _r("empty_answer", "blend", "a response with no text after its think block"),
    _r("no_final_answer", "blend generation", "no stated final answer (`\\boxed{}`, 'answer is') where one is "
       "checked; in generation also an empty answer"),
    _r("disagrees_with_ground_truth", "blend", "a final answer other than the row's ground truth (science "
       "`answer`, chat `ground_truth`)"),
    _r("short_answer", "blend", "a final answer shorter than the stage's `min_answer_tokens` for its domain"),
    _r("over_max_tokens", "blend", "rendered text longer than the stage's `max_tokens` policy tokens"),
    _r("downsampled", "blend", "left out by a domain's `upsample` factor below 1"),
    _r("swe_to_rl", "blend", "a SWE instance the split sends to RL (kept there, not in the SFT blend)"),
    _r("swe:<reason>", "blend prompts", "a SWE instance the split dropped (`<reason>`: a `swe` step reason)"),
    # The SWE split (curation.swe) and patches (curation.patches)
    _r("benchmark_repo", "swe", "an instance of a repository in `curation.swe.exclude_repos`"),
    _r("golden_<reason>", "swe", "an unusable golden patch (`<reason>`: a `patch` step reason)"),
    _r("golden_noop", "swe", "a golden patch that changes nothing"),
    _r("duplicate_instance", "swe", "the same repository and base commit as an earlier instance"),
    _r("no_candidates", "swe", "no candidate patches to score"),
    _r("no_signal", "swe", "every candidate's similarity to the golden patch is 0"),
    _r("unparsable", "patch", "not a unified diff"),
    _r("empty", "patch", "a blank patch, or a diff without changed lines"),
    _r("binary_only", "patch", "a diff of binary files only"),
    # An RL prompt set (curation.prompts)
    _r("missing_<column>", "prompts", "a row without a column the stage kind's verifiers read (`missing_prompt`, "
       "`missing_answer`, `missing_tests`, ...)"),
    _r("overlaps_sft", "prompts", "the prompt is in an SFT corpus of the recipe"),
    _r("overlaps_rl:<stage>", "prompts", "the prompt is in the prompt set of the earlier RL stage `<stage>`"),
    _r("duplicate_prompt", "prompts", "the same normalised prompt as an earlier row of the set"),
    _r("swe_to_sft", "prompts", "a SWE instance the split sends to SFT (kept there, not in the prompt set)"),
    _r("over_cap", "prompts", "beyond the stage's `max_prompts` after the seeded shuffle"),
    # Teacher samples (generation.filters)
    _r("prompt_too_long", "generation", "the rendered prompt leaves no room for `max_new_tokens` in the model's "
       "context (never sent)"),
    _r("truncated", "generation", "the sample reached `max_new_tokens` (finish reason `length`)"),
    _r("verifier_failed", "generation", "the verifier scored below the threshold (its reasons in "
       "`verifier_reasons`)"),
    _r("verifier_error", "generation", "the verifier itself failed (no valid score)"),
    _r("over_quota", "generation", "beyond `max_per_prompt` kept responses per row and mode"),
    _r("pass_rate_zero", "generation", "no sample of the prompt passed (no learning signal)"),
    _r("pass_rate_too_low", "generation", "a pass rate below the band's minimum"),
    _r("pass_rate_too_high", "generation", "every sample passed, or a pass rate above the band's maximum"),
    _r("<reason>_patch", "generation", "an unusable sampled patch (`unparsable_patch`: no diff in the response; "
       "`<reason>`: a `patch` step reason)"),
    # SFT training (trainer.sft)
    _r("no_target_tokens", "training", "a row whose assistant tokens were all cut by the stage's `max_length`"),
)
"""Every quarantine and drop reason, grouped by the step that first counts it."""


def describe(reason: str) -> Reason | None:
    """The entry of a concrete reason: its exact name, else the most specific pattern it matches
    (the one with the longest fixed text); None when it is not registered."""
    exact = next((r for r in REASONS if r.name == reason), None)
    patterns = [r for r in REASONS if "<" in r.name and r.matches(reason)]
    return exact or max(patterns, key=lambda r: len(re.sub(r"<[^>]+>", "", r.name)), default=None)


BEGIN = "<!-- BEGIN GENERATED by `python -m curation.reasons` from curation/reasons.py; edit that, not this -->"
END = "<!-- END GENERATED -->"


def reasons_markdown() -> str:
    """The steps and the reasons as markdown tables, one line each."""
    out = ["| step | where it is counted |", "|---|---|"]
    out += [f"| `{name}` | {where} |" for name, where in STEPS.items()]
    out += ["", "| reason | step | meaning |", "|---|---|---|"]
    out += [f"| `{r.name}` | {', '.join(r.steps)} | {r.meaning} |" for r in REASONS]
    return "\n".join(out)


def with_reasons(text: str) -> str:
    """`text` with the part between the generation markers replaced by `reasons_markdown()`."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + reasons_markdown() + "\n" + text[end:]


if __name__ == "__main__":
    from spec.paths import REPO_ROOT

    doc = Path(REPO_ROOT) / "docs" / "reasons.md"
    doc.write_text(with_reasons(doc.read_text()))
    print(f"updated {doc}")
