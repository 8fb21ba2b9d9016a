"""Patch parsing, normalisation, no-op detection and SWE-RL lexical similarity."""

from __future__ import annotations

import difflib
import random

import pytest

from curation.patches import (
    PatchError,
    lexical_similarity,
    normalise_patch,
    parse_patch,
    patch_is_noop,
    similarity_upper_bound,
    try_parse_patch,
)

GOLD = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\n"
    "index 1111111..2222222 100644\n"
    "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    "@@ -1,3 +1,3 @@\n def f(xs):\n-    return xs[1:]\n+    return xs[0:]\n \n"
)
TWO_FILES = GOLD + "--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def _per_file_difflib(cand: str, gold: str) -> float:
    """Independent reference: SWE-RL's formula written directly with difflib."""
    a, b = parse_patch(cand).files, parse_patch(gold).files
    paths = set(a) | set(b)
    scores = []
    for p in paths:
        x, y = a.get(p, ""), b.get(p, "")
        scores.append(difflib.SequenceMatcher(None, x, y, autojunk=False).ratio() if x and y else 0.0)
    return sum(scores) / len(scores)


def test_parse_reports_files_and_counts():
    p = parse_patch(TWO_FILES)
    assert sorted(p.files) == ["pkg/mod.py", "pkg/other.py"]
    assert (p.added, p.removed) == (2, 2)


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "empty"),
        ("   \n", "empty"),
        (None, "empty"),
        ("I would change the slice to start at zero.", "unparsable"),
        ("--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,2 @@\n a\n-b\n+c\n", "unparsable"),
        ("diff --git a/i.png b/i.png\nindex 1..2 100644\nBinary files a/i.png and b/i.png differ\n", "binary_only"),
    ],
)
def test_parse_errors_have_reasons(text, reason):
    with pytest.raises(PatchError) as err:
        parse_patch(text)
    assert err.value.reason == reason
    assert try_parse_patch(text) == (None, reason)


def test_normalise_ignores_git_headers_and_crlf():
    plain = GOLD.split("index 1111111..2222222 100644\n")[1]
    assert normalise_patch(GOLD) == normalise_patch(plain.replace("\n", "\r\n"))
    assert normalise_patch(GOLD) != normalise_patch(TWO_FILES)


def test_noop_detection():
    assert patch_is_noop("")
    assert patch_is_noop("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 1\n b\n")
    assert not patch_is_noop(GOLD)
    assert not patch_is_noop("not a diff")  # an error, not a no-op


def test_similarity_exact_missing_file_and_partial():
    assert lexical_similarity(GOLD, GOLD) == 1.0
    # the candidate fixes one of two files exactly: the other file scores 0 -> mean 0.5
    assert lexical_similarity(GOLD, TWO_FILES) == pytest.approx(0.5)
    near = GOLD.replace("xs[0:]", "xs[:]")
    s = lexical_similarity(near, GOLD)
    assert 0.5 < s < 1.0
    assert s == pytest.approx(_per_file_difflib(near, GOLD))
    with pytest.raises(PatchError):
        lexical_similarity("garbage", GOLD)


def _random_patch(rng: random.Random) -> str:
    files = rng.sample(["a.py", "b.py", "c.py"], rng.randint(1, 2))
    out = []
    alphabet = "abcdefxyz =+()_:\t"
    for f in files:
        old = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        new = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        out.append(f"--- a/{f}\n+++ b/{f}\n@@ -1,2 +1,2 @@\n ctx\n-{old}\n+{new}\n")
    return "".join(out)


def test_similarity_equals_difflib_and_bound_holds_on_random_patches():
    rng = random.Random(7)
    for _ in range(300):
        a, b = _random_patch(rng), _random_patch(rng)
        exact = lexical_similarity(a, b)
        assert exact == _per_file_difflib(a, b)  # bit-identical, not approximate
        bound = similarity_upper_bound(a, b)
        assert bound + 1e-12 >= exact
        assert (bound == 0.0) == (exact == 0.0)


def test_zero_when_no_common_character():
    a = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    b = "--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert lexical_similarity(a, b) == 0.0 == similarity_upper_bound(a, b)
