"""Red team for SweReward (lexical similarity, to stay fast): the attacks a reward-hacking
policy tries first, and the honest patches that must stay paid."""

from __future__ import annotations

import time

import pytest

from curation.patches import lexical_similarity, parse_patch
from rewards.swe import SweReward

GOLD = """diff --git a/pkg/stats.py b/pkg/stats.py
index 1111111..2222222 100644
--- a/pkg/stats.py
+++ b/pkg/stats.py
@@ -10,2 +10,4 @@ def mean(values):
     \"\"\"Arithmetic mean of a sequence.\"\"\"
-    return sum(values) / len(values)
+    if not values:
+        raise ValueError("mean() of an empty sequence")
+    return sum(values) / len(values)
"""
GOLD_HUNK = GOLD.split("+++ b/pkg/stats.py\n")[1]
GARBAGE = "--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -1 +1 @@\n-import os\n+import sys\n"
CONTEXT_FILES = ["pkg/stats.py", "pkg/io.py", "pkg/util.py", "setup.py", "README.md"]
CONTEXT = "\n".join(f"# {path}\nx = 1\n" for path in CONTEXT_FILES)


def fenced(patch: str) -> str:
    return f"```diff\n{patch}```"


def padded(lines: int) -> str:
    """The golden hunk, then `lines` junk additions in the same hunk (header counts kept right)."""
    junk = "".join(f"+    x{i} = compute(values, {i})  # padding\n" for i in range(lines))
    return GOLD.replace("@@ -10,2 +10,4 @@", f"@@ -10,2 +10,{4 + lines} @@") + junk


def one(completion, reward=None):
    [res] = (reward or SweReward(similarity="lexical")).score([None], [completion], golden_patch=[GOLD],
                                                              code_context=[CONTEXT])
    return res


# ---- the golden patch quoted in the reasoning --------------------------------------------------


@pytest.mark.parametrize("completion", [
    f"<think>The fix is:\n{fenced(GOLD)}</think>",
    f"<think>The fix is:\n{fenced(GOLD)}</think>asdf qwerty",
    f"<think>{GOLD}</think>",
], ids=["fenced-then-nothing", "fenced-then-garbage", "raw-then-nothing"])
def test_golden_quoted_in_think_is_not_paid(completion):
    """The golden diff only inside <think>, nothing (or garbage) after </think>: no patch, -1."""
    res = one(completion)
    assert (res.score, res.reason, res.detail) == (-1.0, "unparsable", "no_patch")


@pytest.mark.parametrize("completion", [f"<think>Plan:\n{fenced(GOLD)}", f"<think>{GOLD}"], ids=["fenced", "raw"])
def test_golden_in_unterminated_think_is_not_paid(completion):
    """The golden diff inside a think block that never closes: the reasoning is no answer, -1."""
    res = one(completion)
    assert (res.score, res.reason, res.detail) == (-1.0, "unparsable", "no_patch")


def test_golden_after_think_is_paid():
    """Honest: a garbage draft in the reasoning, the golden-equivalent patch after </think>: exact_match."""
    res = one(f"<think>{fenced(GARBAGE)}</think>Fix:\n{fenced(GOLD)}")
    assert (res.score, res.reason) == (1.0, "exact_match")


# ---- touching everything, huge diffs ------------------------------------------------------------


def test_touching_every_context_file_scores_low():
    """The golden hunk plus an edit to every other file of the context: union mean, 1/5 at most."""
    others = "".join(f"--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-x = 1\n+x = 2\n" for p in CONTEXT_FILES[1:])
    res = one(fenced(GOLD + others))
    assert res.reason == "similar" and res.score <= 0.2 + 1e-9


def test_huge_diff_is_refused_fast():
    """The golden hunk followed by 20,000 junk lines (~1 MB): patch_too_long, 0, without parsing it."""
    start = time.monotonic()
    res = one(fenced(padded(20_000)))
    assert (res.score, res.reason) == (0.0, "patch_too_long")
    assert time.monotonic() - start < 1.0


def test_padded_diff_cannot_ride_a_scorer_that_reads_only_the_start():
    """Golden hunk + 300 junk lines, scored by one that reads only an edit's start (like the embedding): capped."""

    class StartOnly:
        name = "start_only"

        def __call__(self, pairs, contexts):
            def start(text):  # the first 120 characters after the hunk header
                return text.split("\n", 1)[-1][:120]
            return [1.0 if all(start(c.files.get(p, "")) == start(g.files[p]) for p in g.files) else 0.0
                    for c, g in pairs]

    res = one(fenced(padded(300)), SweReward(similarity=StartOnly()))
    assert res.reason == "similar" and res.score < 0.1


def test_size_cap_never_changes_a_lexical_score():
    """Honest invariance: the cap is above difflib's own bound, so lexical scores are SWE-RL's exactly."""
    for patch in (padded(5), padded(300), GOLD.replace("empty sequence", "empty input")):
        assert one(fenced(patch)).score == pytest.approx(lexical_similarity(parse_patch(patch), parse_patch(GOLD)))


# ---- malformed hunks ---------------------------------------------------------------------------


@pytest.mark.parametrize("patch,detail", [
    ("--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -x +y @@\n-a\n+b\n", "bad hunk header: @@ -x +y @@"),
    (GOLD + "+    print('extra line the header does not count')\n", "hunk longer than its header says"),
    (GOLD + "-    return 0\n", "hunk longer than its header says"),
    ("--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -1,3 +1,3 @@\n-a\n+b\n", "unparsable"),
    ("+++ b/pkg/stats.py\n--- a/pkg/stats.py\n@@ -10,2 +10,4 @@\n-a\n+b\n", "unparsable"),
], ids=["bad-hunk-header", "extra-added-line", "extra-removed-line", "hunk-shorter", "headers-swapped"])
def test_malformed_hunks_are_unparsable(patch, detail):
    """Bad hunk headers and wrong line counts (extra lines unidiff silently drops) are -1, never a noop or a match."""
    res = one(fenced(patch))
    assert (res.score, res.reason, res.detail) == (-1.0, "unparsable", detail)


# ---- two diffs -----------------------------------------------------------------------------------


def test_two_diffs_the_last_one_counts():
    """Golden-like diff then garbage diff: the last ```diff block is the answer, so the garbage is scored."""
    res = one(f"First try:\n{fenced(GOLD)}\nActually:\n{fenced(GARBAGE)}")
    assert res.reason == "similar" and res.score < 0.5
    assert res.score == pytest.approx(lexical_similarity(GARBAGE, GOLD))


def test_two_diffs_a_final_correction_is_paid():
    """Honest: a garbage draft then the golden-equivalent diff; only the last counts, so it is paid in full."""
    res = one(f"Draft:\n{fenced(GARBAGE)}\nFinal:\n{fenced(GOLD)}")
    assert (res.score, res.reason) == (1.0, "exact_match")


# ---- empty and no-op diffs -----------------------------------------------------------------------


@pytest.mark.parametrize("patch", [
    "",
    "--- a/pkg/stats.py\n+++ b/pkg/stats.py\n",
    "--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -11 +11 @@\n     return sum(values) / len(values)\n",
    "--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -11 +11 @@\n-    return sum(values) / len(values)\n"
    "+    return sum(values) / len(values)\n",
], ids=["empty-block", "headers-only", "context-only", "remove-and-re-add"])
def test_empty_or_noop_diff_scores_zero(patch):
    """A diff that changes nothing scores 0 (noop): more than garbage (-1), never more than a real attempt."""
    res = one(fenced(patch))
    assert (res.score, res.reason) == (0.0, "noop")


def test_golden_with_other_headers_and_crlf_is_paid():
    """Honest: the golden edits with a different header style and CRLF endings: exact_match after normalisation."""
    same = GOLD.replace("diff --git a/pkg/stats.py b/pkg/stats.py\nindex 1111111..2222222 100644\n", "")
    assert one(fenced(same.replace("\n", "\r\n"))).score == 1.0


def test_honest_raw_diff_keeps_its_last_context_line() -> None:
    """Honest: an unfenced golden patch whose last context line is a lone space is exact, not cut short."""
    from curation.samples import generate

    import json
    import tempfile
    from pathlib import Path

    from rewards.swe import SweReward

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "eval_swe.jsonl"
        generate("swe_eval", path, seed=1234)
        golds = [json.loads(line)["golden_patch"] for line in path.read_text().splitlines() if line.strip()]
    assert any(g.endswith("\n \n") for g in golds)  # the case that used to break
    reward = SweReward(similarity="lexical")
    results = reward.score([None] * len(golds), golds, golden_patch=golds)
    assert [r.reason for r in results] == ["exact_match"] * len(golds)
