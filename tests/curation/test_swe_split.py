"""SWE curation: filtering reasons, repo exclusion, dedup and the paper's SFT/RL split (docs/cascade_rl.md#swe-data-split)."""

from __future__ import annotations

from curation.patches import lexical_similarity
from curation.swe import SweSplitConfig, split_swe, swe_chat_rows, swe_prompt

GOLD = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n def f(xs):\n-    return xs[1:]\n+    return xs[0:]\n \n"
NEAR = GOLD.replace("xs[0:]", "xs[:]")
PARTIAL = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n def f(xs):\n-    return xs[1:]\n+    return list(reversed(xs))\n \n"
WRONG = "--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
BAD = "I think the slice is wrong."


def _inst(i, cands, repo="acme/lib", commit=None, golden=GOLD):
    return {"row_id": f"s{i}", "source": "swe_pool", "repo": repo, "base_commit": commit or f"c{i}",
            "issue": "f drops the first element", "code_context": "def f(xs):\n    return xs[1:]\n",
            "golden_patch": golden, "candidate_patches": cands}


def test_split_rule_and_accounting():
    assert lexical_similarity(NEAR, GOLD) > 0.5 and 0 < lexical_similarity(PARTIAL, GOLD) <= 0.9
    rows = [
        _inst(0, [GOLD, NEAR, NEAR, GOLD, WRONG, WRONG, BAD, BAD]),      # 4 good -> SFT
        _inst(1, [GOLD, NEAR, NEAR, WRONG, WRONG, WRONG, BAD, BAD]),     # 3 good, non-zero -> RL
        _inst(2, [WRONG] * 6 + [BAD, ""]),                               # all zero -> no_signal
        _inst(3, [GOLD] * 8, repo="django/django"),                       # benchmark repo
        _inst(4, [GOLD] * 8, commit="c0"),                                # duplicate of instance 0
        _inst(5, [GOLD] * 8, golden="not a diff"),                        # golden unparsable
        _inst(6, [GOLD] * 8, golden="--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x\n+x\n"),  # golden no-op
        _inst(7, []),
        _inst(8, [GOLD] * 4 + [WRONG] * 4 + [GOLD] * 4),                 # only the first 8 count
    ]
    cfg = SweSplitConfig(exclude_repos=["django/django"])
    out = split_swe(rows, cfg)
    assert out.sft.column("row_id").to_pylist() == ["s0", "s8"]
    assert out.sft.column("best_patch").to_pylist() == [GOLD, GOLD]
    assert out.rl.column("row_id").to_pylist() == ["s1"]
    assert out.rl.column("good").to_pylist() == [3]
    assert out.dropped == {"no_signal": 1, "benchmark_repo": 1, "duplicate_instance": 1,
                           "golden_unparsable": 1, "golden_noop": 1, "no_candidates": 1}
    assert out.candidates_dropped == {"unparsable": 5, "empty": 1}
    assert out.rows_in == out.sft.num_rows + out.rl.num_rows + sum(out.dropped.values())


def test_threshold_is_strict_and_configurable():
    rows = [_inst(0, [NEAR] * 8)]
    sim = lexical_similarity(NEAR, GOLD)
    assert split_swe(rows, SweSplitConfig(similarity_threshold=sim)).rl.num_rows == 1
    assert split_swe(rows, SweSplitConfig(similarity_threshold=sim - 1e-6)).sft.num_rows == 1


def test_sft_chat_rows_carry_prompt_and_patch():
    out = split_swe([_inst(0, [GOLD] * 8)])
    (row,) = swe_chat_rows(out.sft)
    assert row["prompt"] == swe_prompt("f drops the first element", "def f(xs):\n    return xs[1:]\n")
    assert row["no_think_response"].startswith("```diff\n--- a/m.py") and row["think_response"] is None
