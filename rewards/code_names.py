"""Which names the assert-kind tests resolve, and who supplies each: the row or the candidate.

The judge (rewards.code_judge) runs the dataset's tests in a namespace it builds itself. If
every function the candidate declares were bound there, a candidate could define `len`, `abs`,
`sorted`, `range`, a module name or a helper the tests call, and a wrong solution would pass
(`def len(x): return 5` makes `assert len(f(10)) == 5` true). So names come from the row and
the judge, never from whatever the candidate declares:

- candidate (a proxy to its process): the `entry_point`, and the functions the row's prompt
  declares as stubs (signature + docstring, HumanEval-style) for the candidate to write;
- the row's prompt, run in the judge: its stdlib imports (`from typing import List`,
  `import math`), its literal constants and its helpers that have a body (HumanEval 10's
  `is_palindrome`, 32's `poly`, 38's `encode_cyclic`), so a candidate that redefines a helper
  the tests call changes nothing;
- the judge: builtins, and any stdlib module the tests name without importing it;
- only when the row names no entry point and its prompt declares no stub, the names the tests
  use without defining them (not builtins, not modules) are the candidate's: nothing else could
  supply them, and nothing of the judge's is shadowed.

The prompt is plain text or chat messages; its Python is found with `ast`: the whole text, else
each fenced block, else the longest parseable run of lines from each line that starts a
top-level `def`/`import`/`class` (so "Complete the following function.\\n\\n<code>" works).
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import sys
from typing import Any

from rewards.fences import fenced_blocks

_CODE_START_RE = re.compile(r"(?:async\s+def|def|class|import|from\s+[\w.]+\s+import|@)\b")
_STDLIB = frozenset(sys.stdlib_module_names)
_BUILTINS = frozenset(dir(builtins))


def prompt_text(prompt: Any) -> str:
    """The text of a prompt: a string, or the contents of chat messages joined."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        return str(prompt.get("content") or "")
    if isinstance(prompt, (list, tuple)):
        return "\n\n".join(prompt_text(m) for m in prompt)
    return ""


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def python_modules(text: str) -> list[ast.Module]:
    """The Python in a prompt (see module docstring)."""
    whole = _parse(text)
    if whole is not None:
        return [whole]
    fenced = [tree for _, block in fenced_blocks(text) if (tree := _parse(block)) is not None]
    if fenced:
        return fenced
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if not _CODE_START_RE.match(lines[i]):
            i += 1
            continue
        end = len(lines)
        while end > i:  # shrink to the line before the first syntax error
            try:
                out.append(ast.parse("\n".join(lines[i:end])))
                break
            except SyntaxError as err:
                cut = i + (err.lineno or 1) - 1
                end = cut if i < cut < end else end - 1
            except (ValueError, RecursionError, MemoryError):
                end = i
        i = max(end, i + 1)
    return out


def _is_stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body of only a docstring, `pass`, `...` or `raise NotImplementedError`."""
    for stmt in node.body:
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue
        if isinstance(stmt, ast.Raise) and "NotImplementedError" in ast.unparse(stmt):
            continue
        return False
    return True


def _stdlib_import(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in _STDLIB
    return all(alias.name.split(".")[0] in _STDLIB for alias in node.names)


def _literal(node: ast.Assign) -> bool:
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return all(isinstance(t, ast.Name) for t in node.targets)


def _free_names(snippets: tuple[str, ...]) -> set[str]:
    """Names the tests read but never bind anywhere (an over-approximation of binding: safe)."""
    loaded, bound = set(), set()
    for snippet in snippets:
        tree = _parse(snippet)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                bound.update(node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
    return loaded - bound


@functools.lru_cache(maxsize=4096)
def _bindings(text: str, entry_point: str | None, snippets: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """(proxies, prelude, modules); cached: a GRPO group shares its prompt and tests."""
    proxies, prelude, defined = [], [], set()
    if entry_point:
        proxies.append(entry_point)
    for tree in python_modules(text) if text else []:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name == entry_point or _is_stub(node):
                    if node.name not in proxies:
                        proxies.append(node.name)
                    continue
                prelude.append(ast.unparse(node))
                defined.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and _stdlib_import(node):
                prelude.append(ast.unparse(node))
                defined.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Assign) and _literal(node):
                prelude.append(ast.unparse(node))
                defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    free = _free_names(snippets) - _BUILTINS - defined - set(proxies)
    modules = sorted(name for name in free if name in _STDLIB)
    if not proxies:  # nothing names the candidate's functions: the tests' unbound names are its
        proxies = sorted(free - set(modules))
    return tuple(proxies), tuple(prelude), tuple(modules)


def judge_bindings(prompt: Any, spec: dict) -> dict[str, list[str]]:
    """What the judge binds for an assert-kind `spec` and the row's `prompt`:
    `proxies` (names served by the candidate, when it defines them), `prelude` (the prompt's
    stdlib imports, constants and helper bodies, run in the judge in order) and `modules`
    (stdlib modules the tests use unimported).

    >>> b = judge_bindings("from typing import List\\ndef f(x: List[int]) -> int:\\n    '''Sum.'''\\n",
    ...                    {"entry_point": "f", "asserts": ["assert abs(f([1])) == math.floor(1.2)"]})
    >>> b["proxies"], b["prelude"], b["modules"]
    (['f'], ['from typing import List'], ['math'])
    """
    proxies, prelude, modules = _bindings(prompt_text(prompt), spec.get("entry_point"), tuple(spec["asserts"]))
    return {"proxies": list(proxies), "prelude": list(prelude), "modules": list(modules)}
