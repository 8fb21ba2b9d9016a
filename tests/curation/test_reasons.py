"""The reasons registry (curation/reasons.py) is complete and current, and docs/reasons.md is made of it.

The code is scanned (ast) for the reason literals it emits; a literal is any string (an f-string
as its pattern, `{}` for each placeholder) in one of these places:

1. the first argument of `InvalidRow(...)` / `PatchError(...)` (a quarantined row, an unusable patch);
2. an argument of a drop counter: `drop(...)`, `account.drop(...)`, `_bump(counts, ...)`,
   `drop_all(..., prefix=...)` (the prefix becomes `<prefix>{}`);
3. a key of a dict named `dropped` (`dropped["no_response"] += 1`);
4. what a function named `*problem` or `reason` returns, and a value assigned to a name or
   attribute `problem` / `reason` (`problem = "over_quota" if ... else None`);
5. the second item of a yielded `(None, reason, raw)` reader record;
6. an argument of `<table>["reason"].append(...)` (dedup's removed rows).

A module-level constant (`PROMPT_TOO_LONG = "prompt_too_long"`) in these places counts as its value.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from curation.reasons import BEGIN, END, REASONS, STEPS, describe, reasons_markdown, with_reasons
from spec.paths import REPO_ROOT

PACKAGES = ("curation", "generation", "trainer", "assets")
COUNTERS = {"drop", "_bump", "drop_all"}
RAISED = {"InvalidRow", "PatchError"}
HOLDERS = {"problem", "reason"}


def _strings(node: ast.AST, consts: dict[str, str]) -> set[str]:
    """The string values an expression can be: constants, f-string patterns, both arms of `a if c else b`."""
    if isinstance(node, ast.Constant):
        return {node.value} if isinstance(node.value, str) else set()
    if isinstance(node, ast.JoinedStr):
        pattern = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        return {pattern} if pattern.replace("{}", "") else set()  # a bare f"{x}" is no reason name
    if isinstance(node, ast.IfExp):
        return _strings(node.body, consts) | _strings(node.orelse, consts)
    if isinstance(node, (ast.Tuple, ast.BoolOp)):
        return set().union(*(_strings(v, consts) for v in (node.elts if isinstance(node, ast.Tuple) else node.values)))
    if isinstance(node, ast.Name) and node.id in consts:
        return {consts[node.id]}
    return set()


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _reason_nodes(node: ast.AST) -> list[ast.AST]:
    """The sub-expressions of `node` that hold reasons (the rules of the module docstring)."""
    if isinstance(node, ast.Call):
        called = _name(node.func)
        if called in RAISED:
            return node.args[:1]
        if called in COUNTERS:
            prefix = [k.value for k in node.keywords if k.arg == "prefix"]
            return [*node.args, *(ast.JoinedStr([p, ast.FormattedValue(ast.Name("x"), -1)]) for p in prefix)]
        target = node.func.value if isinstance(node.func, ast.Attribute) else None
        if called == "append" and isinstance(target, ast.Subscript) and (
                getattr(target.slice, "value", None) == "reason"):
            return node.args
    if isinstance(node, ast.FunctionDef) and (node.name.endswith("problem") or node.name == "reason"):
        return [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
    if isinstance(node, ast.Assign) and any(_name(t) in HOLDERS for t in node.targets):
        return [node.value]
    if isinstance(node, ast.Subscript) and _name(node.value) == "dropped":
        return [node.slice]
    if isinstance(node, (ast.Yield, ast.YieldFrom)) and node.value is not None:
        return [t.elts[1] for t in ast.walk(node.value) if isinstance(t, ast.Tuple) and len(t.elts) == 3
                and isinstance(t.elts[0], ast.Constant) and t.elts[0].value is None]
    return []


def emitted_reasons() -> dict[str, set[str]]:
    """Reason literal or f-string pattern -> the `file:line`s that emit it."""
    files = [p for pkg in PACKAGES for p in sorted((REPO_ROOT / pkg).rglob("*.py"))]
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in files}
    consts = {t.id: n.value.value for tree in trees.values() for n in tree.body
              if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
              for t in n.targets if isinstance(t, ast.Name) and t.id.isupper()}
    found: dict[str, set[str]] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            for part in _reason_nodes(node):
                for text in _strings(part, consts):
                    found.setdefault(text, set()).add(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


def _pattern(name: str) -> str:
    """A registry name as the scan writes it: every `<param>` as `{}`."""
    return re.sub(r"<[^>]+>", "{}", name)


def test_the_scan_finds_what_the_code_emits() -> None:
    """The rules reach every kind of place reasons are made in (a broken rule would pass everything)."""
    found = emitted_reasons()
    for reason, where in {"missing_field:{}": "curation/rows.py", "bad_tool_call": "curation/formats_chat.py",
                          "invalid_json": "curation/sources.py", "contaminated:{}": "assets/corpora.py",
                          "near_duplicate": "curation/dedup_stages.py", "duplicate_example": "curation/blends.py",
                          "over_cap": "curation/prompts.py", "no_response": "curation/chat.py",
                          "empty_answer": "curation/chat.py", "golden_{}": "curation/swe.py",
                          "binary_only": "curation/patches.py", "verifier_failed": "generation/filters.py",
                          "pass_rate_zero": "generation/filters.py", "{}_patch": "generation/filters.py",
                          "prompt_too_long": "generation/filters.py", "no_target_tokens": "trainer/sft.py"}.items():
        assert any(w.startswith(where) for w in found.get(reason, ())), (reason, where, found.get(reason))


def test_every_emitted_reason_is_registered() -> None:
    patterns = {_pattern(r.name) for r in REASONS}
    missing = {text: sorted(where) for text, where in emitted_reasons().items()
               if text not in patterns and ("{}" in text or describe(text) is None)}
    assert not missing, f"reasons the code emits that curation/reasons.py does not list: {missing}"


def test_every_registered_reason_is_emitted() -> None:
    found = set(emitted_reasons())
    stale = [r.name for r in REASONS if _pattern(r.name) not in found]
    assert not stale, f"curation/reasons.py lists reasons no code emits any more: {stale}"


def test_the_registry_is_well_formed() -> None:
    names = [r.name for r in REASONS]
    assert len(names) == len(set(names)), "a reason listed twice"
    for r in REASONS:
        assert set(r.steps) <= set(STEPS) and r.steps, r
        assert r.meaning and "\n" not in r.meaning and "|" not in r.meaning, r
        assert r.name.count("<") <= 1 and re.fullmatch(r"[a-z_:]*(<[a-z ]+>)?[a-z_:]*", r.name), r.name


@pytest.mark.parametrize("reason, entry", [
    ("missing_field:messages", "missing_field:<field>"), ("bad_role:robot", "bad_role:<role>"),
    ("golden_noop", "golden_noop"), ("golden_unparsable", "golden_<reason>"), ("empty_patch", "<reason>_patch"),
    ("contaminated:gsm8k", "contaminated:<benchmark>"), ("empty", "empty"), ("missing_answer", "missing_<column>"),
])
def test_describe_finds_a_concrete_reason(reason: str, entry: str) -> None:
    assert describe(reason).name == entry


def test_describe_knows_no_unregistered_reason() -> None:
    assert describe("no_such_reason") is None and describe("missing_field:") is None


def test_the_doc_is_generated_from_the_registry() -> None:
    text = (REPO_ROOT / "docs" / "reasons.md").read_text(encoding="utf-8")
    section = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")
    assert section == reasons_markdown(), "docs/reasons.md is stale: run `python -m curation.reasons`"
    assert with_reasons(text) == text
    assert all(f"| `{r.name}` |" in section for r in REASONS)


def test_the_sample_sources_quarantine_only_registered_reasons(tmp_path: Path) -> None:
    """At run time too: the default recipe's built-in sources (they plant broken rows) drop for listed reasons."""
    from curation.samples import generate
    from curation.sources import load_source
    from spec.recipe import load_recipe

    seen: dict[str, int] = {}
    for spec in load_recipe(REPO_ROOT / "recipes" / "default.yaml").sources:
        if spec.generate:
            path = generate(spec.generate, tmp_path / f"{spec.name}.jsonl")
            for reason, n in load_source(path, spec.format, spec.domain, spec.name, reader=spec.reader).dropped.items():
                seen[reason] = seen.get(reason, 0) + n
    assert {"invalid_json", "missing_field:answer"} <= set(seen), seen
    assert [r for r in seen if describe(r) is None] == [], seen
