"""Unified-diff patches: parsing, normalisation and SWE-RL lexical similarity.

Shared by SWE curation (the SFT/RL split of teacher patches, `curation.swe`) and the
execution-free SWE reward (`rewards/swe.py`), so both score a patch the same way.

Lexical similarity follows SWE-RL: each patch is split per touched file into that file's
unified-diff hunk text; a file touched by both patches scores
`difflib.SequenceMatcher(None, candidate, golden, autojunk=False).ratio()`, a file touched
by only one side scores 0, and the patch score is the mean over the UNION of touched files.
`autojunk=False` because autojunk silently ignores frequent characters (spaces, `e`) in
texts over 200 characters, which makes long patches look less similar than they are.

Why rapidfuzz appears: difflib's ratio is 2·M/T where M is the size of a common
subsequence, so it never exceeds the Indel similarity 2·LCS/T that rapidfuzz computes in
C. That bound answers two questions exactly and fast: "is the score zero?" (no common
character) and "can this candidate beat a threshold?" (`similarity_upper_bound`). The
score itself is always difflib's, so numbers match SWE-RL's implementation.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from rapidfuzz.distance import Indel

class PatchError(ValueError):
    """A patch that cannot be used; `reason` is `unparsable`, `empty` or `binary_only`."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ParsedPatch:
    """A parsed patch reduced to what comparisons need."""

    files: dict[str, str]
    """Touched text file path (no a/ b/ prefix) -> its hunk text (the per-file unified diff)."""
    added: int = 0
    """Number of added lines over all text files."""
    removed: int = 0
    """Number of removed lines over all text files."""
    changes: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    """Per path: (removed line values, added line values), for no-op detection."""

    def normalised(self) -> str:
        """Canonical text: a/ b/ headers and hunks only, files in path order, LF endings."""
        parts = [f"--- a/{path}\n+++ b/{path}\n{self.files[path]}" for path in sorted(self.files)]
        return "".join(parts)


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text if text.endswith("\n") or not text else text + "\n"


def parse_patch(text: str | None) -> ParsedPatch:
    """Parse a unified diff; raise PatchError('unparsable' | 'empty' | 'binary_only').

    >>> p = parse_patch("--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a = 1\\n+a = 2\\n")
    >>> list(p.files), p.added, p.removed
    (['x.py'], 1, 1)
    >>> parse_patch("please fix the bug")
    Traceback (most recent call last):
    ...
    curation.patches.PatchError: unparsable: no file diff found
    """
    from unidiff import PatchSet
    from unidiff.errors import UnidiffParseError

    if text is None or not text.strip():
        raise PatchError("empty", "blank patch")
    try:
        patch_set = PatchSet(_clean(text))
    except (UnidiffParseError, ValueError, IndexError) as err:
        raise PatchError("unparsable", str(err)) from None
    if len(patch_set) == 0:
        raise PatchError("unparsable", "no file diff found")
    files: dict[str, str] = {}
    binary: list[str] = []
    changes: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    added = removed = 0
    for pfile in patch_set:
        if pfile.is_binary_file:
            binary.append(pfile.path)
            continue
        # A file touched twice in one patch: its hunks are concatenated in order.
        files[pfile.path] = files.get(pfile.path, "") + "".join(str(h) for h in pfile)
        old, new = changes.get(pfile.path, ((), ()))
        for hunk in pfile:
            old += tuple(line.value for line in hunk if line.is_removed)
            new += tuple(line.value for line in hunk if line.is_added)
        changes[pfile.path] = (old, new)
        added += pfile.added
        removed += pfile.removed
    if not files:
        raise PatchError("binary_only", ", ".join(binary))
    if added == 0 and removed == 0 and all(not h for h in files.values()):
        raise PatchError("empty", "no hunks")
    return ParsedPatch(files, added, removed, changes)


def try_parse_patch(text: str | None) -> tuple[ParsedPatch | None, str | None]:
    """(parsed, None) or (None, reason): the non-raising form for batch filtering."""
    try:
        return parse_patch(text), None
    except PatchError as err:
        return None, err.reason


def normalise_patch(text: str) -> str:
    """Canonical form of a patch (drops `diff --git`/`index` lines, CRLF, prefix quirks).

    Two patches that make the same edits with different headers normalise equally.
    Raises PatchError like `parse_patch`.
    """
    return parse_patch(text).normalised()


def patch_is_noop(text: str | None) -> bool:
    """True when applying the patch leaves the code unchanged.

    Blank patches, hunks with only context lines, and hunks that remove and re-add the very
    same lines are no-ops. An unparsable or binary-only patch is NOT a no-op (it is an
    error, scored differently by the SWE reward).

    >>> patch_is_noop("")
    True
    >>> patch_is_noop("--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a = 1\\n+a = 1\\n")
    True
    """
    try:
        parsed = parse_patch(text)
    except PatchError as err:
        return err.reason == "empty"
    return all(old == new for old, new in parsed.changes.values())


def _as_parsed(patch: str | ParsedPatch) -> ParsedPatch:
    return patch if isinstance(patch, ParsedPatch) else parse_patch(patch)


def _file_ratio(a: str, b: str) -> float:
    if a == b:
        return 1.0
    if not a or not b or Indel.normalized_similarity(a, b) == 0.0:
        return 0.0  # no common character: difflib's ratio is exactly 0 too
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def lexical_similarity(candidate: str | ParsedPatch, golden: str | ParsedPatch) -> float:
    """SWE-RL lexical similarity in [0, 1], averaged over the union of touched files.

    Raises PatchError when either patch is unusable (callers decide the penalty).

    >>> g = "--- a/x.py\\n+++ b/x.py\\n@@ -1 +1 @@\\n-a = 1\\n+a = 2\\n"
    >>> lexical_similarity(g, g)
    1.0
    >>> other = "--- a/y.py\\n+++ b/y.py\\n@@ -1 +1 @@\\n-a = 1\\n+a = 2\\n"
    >>> lexical_similarity(other, g)
    0.0
    """
    cand, gold = _as_parsed(candidate), _as_parsed(golden)
    paths = set(cand.files) | set(gold.files)
    return sum(_file_ratio(cand.files.get(p, ""), gold.files.get(p, "")) for p in paths) / len(paths)


def similarity_upper_bound(candidate: str | ParsedPatch, golden: str | ParsedPatch) -> float:
    """A cheap upper bound of `lexical_similarity` (rapidfuzz Indel, per file, same averaging).

    Exactly 0 iff the similarity is 0; a candidate whose bound is <= a threshold cannot
    exceed it, so threshold counting only runs difflib on the rest.
    """
    cand, gold = _as_parsed(candidate), _as_parsed(golden)
    paths = set(cand.files) | set(gold.files)
    total = 0.0
    for p in paths:
        a, b = cand.files.get(p, ""), gold.files.get(p, "")
        total += 1.0 if a == b else (Indel.normalized_similarity(a, b) if a and b else 0.0)
    return total / len(paths)
