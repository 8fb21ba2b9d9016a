"""Repository hygiene: modules stay small, nothing points at files that are not in the repo, and
every link into docs/ lands on a file and heading that exist."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("spec", "curation", "sandboxes", "rewards", "generation", "trainer", "assets", "dagster_project")
MAX_MODULE_LINES = 400
# References to documents that are not part of this repository (spelt in pieces so that this
# file does not itself name them to a plain text search).
STALE_REFERENCES = ("PAPER" + ".md", "DESIGN" + ".md", ".." + "/shared")
SKIP_DIRS = ("tests/architecture/snapshots/",)
THIS_FILE = Path(__file__).resolve().relative_to(REPO).as_posix()

# A link into docs/: the file name and the #fragment (GitHub anchors are letters, digits, '_', '-').
DOC_LINK = re.compile(r"\bdocs/([\w.-]+\.md)#([\w-]+)")


@cache
def repo_text_files() -> tuple[tuple[str, str], ...]:
    """(path, text) of every file git knows about: tracked ones plus new, not-ignored ones, so a
    file mid-refactor is checked before it is committed. Deleted, binary, snapshot files and this
    test file are skipped."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO, capture_output=True, check=True, timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # not a git checkout (e.g. an sdist)
        pytest.skip(f"git ls-files unavailable: {exc}")
    files = []
    for rel in sorted({p for p in out.decode().split("\0") if p}):
        if rel == THIS_FILE or rel.startswith(SKIP_DIRS):
            continue
        path = REPO / rel
        if not path.is_file():  # deleted in the working tree, or a submodule
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            files.append((rel, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return tuple(files)


def test_no_module_is_oversized() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > MAX_MODULE_LINES:
                offenders.append(f"{path.relative_to(REPO).as_posix()}: {n} lines")
    assert not offenders, (
        f"modules longer than {MAX_MODULE_LINES} lines (split them):\n  " + "\n  ".join(offenders))


def test_no_references_to_files_outside_the_repo() -> None:
    hits = []
    for rel, text in repo_text_files():
        for lineno, line in enumerate(text.splitlines(), 1):
            for needle in STALE_REFERENCES:
                if needle in line:
                    hits.append(f"{rel}:{lineno}: {needle}: {line.strip()[:160]}")
    assert not hits, (
        "references to documents that are not in this repository:\n  " + "\n  ".join(hits))


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: rendered text, lowercased, punctuation dropped, spaces to '-'."""
    text = re.sub(r"<[^>]+>", "", heading)                     # inline HTML
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)     # [text](url) -> text
    text = text.replace("`", "").replace("*", "")              # code spans, emphasis
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def doc_anchors(name: str) -> frozenset[str] | None:
    """Every anchor of docs/<name> (headings, with GitHub's -1, -2 suffixes for repeats, and
    explicit <a id/name=...>), or None when the file does not exist."""
    path = REPO / "docs" / name
    if not path.is_file():
        return None
    anchors: set[str] = set()
    seen: dict[str, int] = {}

    def add_heading(text: str) -> None:
        slug = github_anchor(text)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")

    in_fence = False
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s{0,3}(```|~~~)", line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        anchors.update(re.findall(r"""<a\s+[^>]*?(?:id|name)\s*=\s*["']?([^"'\s>]+)""", line))
        if m := re.match(r"\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line):
            add_heading(m.group(1))
        elif (i + 1 < len(lines) and line.strip() and not line.lstrip().startswith(("-", "*", ">", "|"))
              and re.fullmatch(r"\s{0,3}(=+|-+)\s*", lines[i + 1])):
            add_heading(line)                                   # setext heading
    return frozenset(anchors)


def test_doc_links_resolve() -> None:
    broken = []
    for rel, text in repo_text_files():
        for lineno, line in enumerate(text.splitlines(), 1):
            for name, anchor in DOC_LINK.findall(line):
                anchors = doc_anchors(name)
                if anchors is None:
                    broken.append(f"{rel}:{lineno}: docs/{name}#{anchor}: no file docs/{name}")
                elif anchor not in anchors:
                    broken.append(f"{rel}:{lineno}: docs/{name}#{anchor}: no such heading in docs/{name}")
    assert not broken, "links into docs/ that do not resolve:\n  " + "\n  ".join(broken)
