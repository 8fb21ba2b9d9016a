"""SWE sample data made by mutating REAL Python source into a bug.

A function is taken from an installed stdlib module (its real file and line numbers);
one operator or constant is flipped (off-by-one, comparison, arithmetic, and/or). A
mutation is kept only when it changes behaviour on the function's example calls; the
first differing call becomes the issue's symptom. The golden patch is the fix as a
unified diff with a/ b/ paths; `code_context` is the buggy function excerpt.
`candidate_patches` are eight teacher patches of varied quality (exact, near, partial,
wrong, wrong file, unparsable, empty), mixed so the pool splits into SFT, RL and
no-signal instances. A few instances come from a SWE-bench repository (psf/requests,
when installed) and a few are duplicates, so exclusion and dedup visibly act.
See `curation.samples` for the shared design.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import inspect
import io
import random
import sys
import tokenize
from functools import lru_cache
from typing import Any

from curation.samples.common import draw, interleave, make_rng

# (module, function, example calls). Calls are argument tuples.
FUNCTIONS: list[tuple[str, str, list[tuple]]] = [
    ("statistics", "median", [([1, 3, 5],), ([1, 3, 5, 7],), ([4, 1, 2, 8, 5, 9],)]),
    ("statistics", "median_low", [([1, 3, 5, 7],), ([5, 2, 9],), ([1, 2],)]),
    ("statistics", "median_high", [([1, 3, 5, 7],), ([5, 2, 9],), ([1, 2],)]),
    ("calendar", "isleap", [(1900,), (2000,), (2024,), (2023,)]),
    ("calendar", "leapdays", [(1990, 2030), (2000, 2001), (1896, 1905)]),
    ("colorsys", "rgb_to_hsv", [(0.2, 0.4, 0.4), (0.9, 0.1, 0.3), (0.5, 0.5, 0.1)]),
    ("colorsys", "hsv_to_rgb", [(0.6, 0.5, 0.4), (0.1, 0.9, 0.8), (0.95, 0.3, 0.7)]),
    ("colorsys", "rgb_to_hls", [(0.2, 0.4, 0.4), (0.9, 0.1, 0.3), (0.8, 0.7, 0.9)]),
    ("colorsys", "rgb_to_yiq", [(0.2, 0.4, 0.4), (0.9, 0.1, 0.3)]),
    ("colorsys", "yiq_to_rgb", [(0.5, 0.1, 0.05), (0.3, -0.2, 0.1)]),
    ("textwrap", "indent", [("a\n\nb\n", "> "), ("x\n  y\n", "  ")]),
    ("string", "capwords", [("hello  big world",), ("a-b c-d", "-")]),
    ("posixpath", "basename", [("/usr/lib/x.py",), ("dir/",), ("name",)]),
    ("posixpath", "dirname", [("/usr/lib/x.py",), ("//a",), ("a/b/",)]),
    ("posixpath", "commonprefix", [(["/usr/lib", "/usr/local"],), (["abc", "abd", "ab"],)]),
    ("genericpath", "_splitext", [("a/b.txt", "/", None, "."), ("x.tar.gz", "/", None, "."), (".bashrc", "/", None, ".")]),
    ("bisect", "bisect_right", [([1, 2, 2, 3], 2), ([1, 3, 5], 0), ([1, 3, 5], 6)]),
    ("bisect", "bisect_left", [([1, 2, 2, 3], 2), ([1, 3, 5], 4), ([1, 3, 5], 6)]),
    ("heapq", "nsmallest", [(2, [5, 1, 4, 2]), (3, [9, 8, 7, 1])]),
    ("html", "escape", [("<a href='x'>&</a>",), ("\"q\"", False)]),
    ("fnmatch", "filter", [(["a.py", "b.txt", "c.py"], "*.py")]),
    ("base64", "b16encode", [(b"hi",)]),
    ("shlex", "join", [(["echo", "a b"],)]),
    ("datetime", "_days_before_year", [(1,), (2000,), (2024,)]),
    ("datetime", "_days_in_month", [(2024, 2), (2023, 2), (2023, 4)]),
    ("datetime", "_days_before_month", [(2024, 3), (2023, 1), (2023, 12)]),
    ("datetime", "_ymd2ord", [(2024, 3, 1), (1, 1, 1)]),
    ("datetime", "_is_leap", [(1900,), (2000,), (2024,)]),
    ("calendar", "monthrange", [(2024, 2), (2023, 11)]),
    ("calendar", "weekday", [(2024, 3, 1), (1999, 12, 31)]),
    ("calendar", "_monthlen", [(2024, 2), (2023, 2), (2023, 12)]),
    ("colorsys", "hls_to_rgb", [(0.6, 0.5, 0.4), (0.1, 0.3, 0.8), (0.9, 0.7, 0.5)]),
    ("posixpath", "normpath", [("/a//b/./c/../d",), ("a/../../b",), ("//x/y/",)]),
    ("posixpath", "split", [("/usr/lib/x.py",), ("name",), ("//a//b",)]),
    ("statistics", "quantiles", [([1, 2, 3, 4, 5, 6, 7, 8],), ([2, 4, 8, 16], 3)]),
    ("statistics", "median_grouped", [([1, 2, 2, 3, 4],), ([52, 52, 53, 54],)]),
    ("datetime", "_ord2ymd", [(738946,), (1,), (730120,)]),
    ("heapq", "nlargest", [(2, [5, 1, 4, 2]), (1, [3, 9, 2])]),
    # Held out (EVAL_MODULES): Windows path handling, enough mutations for 128 eval instances.
    ("ntpath", "splitdrive", [("C:\\a\\b",), ("\\\\srv\\share\\x",), ("rel\\p",)]),
    ("ntpath", "normpath", [("C:\\a\\..\\b\\.\\c",), ("a\\\\b\\..",), ("..\\x",)]),
    ("ntpath", "split", [("C:\\a\\b.txt",), ("b",), ("C:\\",)]),
    ("ntpath", "isabs", [("C:\\a",), ("a\\b",), ("\\\\srv\\s",)]),
    ("ntpath", "join", [("C:\\a", "b"), ("a", "C:\\b"), ("a", "", "b")]),
    ("ntpath", "commonpath", [(["C:\\a\\b", "C:\\a\\c"],), (["a\\b\\c", "a\\b"],)]),
    ("ntpath", "relpath", [("C:\\a\\b\\c", "C:\\a"), ("C:\\a", "C:\\a\\b\\c")]),
]
BENCHMARK_FUNCTIONS = [  # psf/requests is a SWE-bench repository: these instances are excluded
    ("requests.utils", "dotted_netmask", [(24,), (8,)]),
    ("requests.utils", "unquote_header_value", [('"abc"',), ("plain",)]),
    ("requests.utils", "address_in_network", [("192.168.1.1", "192.168.1.0/24"), ("10.0.0.1", "192.168.1.0/24")]),
]
# Held-out module: eval instances never share a file (so no code or docstring) with training.
EVAL_MODULES = {"colorsys", "ntpath"}
ALL_SLOTS = tuple(range(10))
FLIPS = {"+": "-", "-": "+", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
         "and": "or", "or": "and", "//": "/", "*": "+"}


@lru_cache(maxsize=None)
def _module_source(module: str) -> tuple[str, str]:
    """(repo-relative path, source text) of an installed module."""
    mod = importlib.import_module(module)
    path = inspect.getsourcefile(mod) or ""
    text = open(path, encoding="utf-8").read()
    rel = f"Lib/{module.replace('.', '/')}.py" if not module.startswith("requests") else "src/requests/utils.py"
    return rel, text


def _function_span(source: str, name: str) -> tuple[int, int]:
    """1-based first and last line of the top-level function `name`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return first, node.end_lineno or node.lineno
    raise LookupError(name)


def _sites(func_src: str) -> list[tuple[int, int, str, str]]:
    """Mutation sites in a function: (line offset, column, old token, new token)."""
    sites = []
    for tok in tokenize.generate_tokens(io.StringIO(func_src).readline):
        text = tok.string
        if (tok.type == tokenize.OP or tok.type == tokenize.NAME) and text in FLIPS:
            sites.append((tok.start[0] - 1, tok.start[1], text, FLIPS[text]))
        elif tok.type == tokenize.NUMBER and text.isdigit() and int(text) <= 12:
            sites.append((tok.start[0] - 1, tok.start[1], text, str(int(text) + 1)))
    # Skip the signature line and docstring-free decorators: bugs live in bodies.
    return [s for s in sites if s[0] > 0]


class _StepLimit(Exception):
    """A mutated function ran too long (e.g. a loop bound flipped into an endless loop)."""


def _limited(fn: Any, args: list, max_lines: int = 20000) -> Any:
    """Call fn with a line budget (sys.settrace works in any thread, unlike alarms)."""
    steps = 0

    def tracer(_frame: Any, event: str, _arg: Any) -> Any:
        nonlocal steps
        if event == "line":
            steps += 1
            if steps > max_lines:
                raise _StepLimit
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        value = fn(*args)
        return list(value) if inspect.isgenerator(value) or isinstance(value, map) else value
    finally:
        sys.settrace(old)


def _call(module: str, func_src: str, name: str, args: tuple) -> str:
    namespace = dict(vars(importlib.import_module(module)))
    exec(compile(func_src, f"<{module}>", "exec"), namespace)  # stdlib code, trusted
    try:
        value = _limited(namespace[name], [list(a) if isinstance(a, list) else a for a in args])
        if isinstance(value, (tuple, list)):
            value = type(value)(round(v, 6) if isinstance(v, float) else v for v in value)
        return repr(round(value, 6) if isinstance(value, float) else value)
    except _StepLimit:
        return "never returns"
    except Exception as err:  # noqa: BLE001 - a crash is a symptom too
        return f"raises {type(err).__name__}"


def _apply(lines: list[str], line: int, col: int, old: str, new: str) -> list[str]:
    out = list(lines)
    out[line] = out[line][:col] + new + out[line][col + len(old):]
    return out


def _diff(before: list[str], after: list[str], path: str, context: int = 3) -> str:
    return "".join(difflib.unified_diff(before, after, f"a/{path}", f"b/{path}", n=context))


@lru_cache(maxsize=None)
def mutations(module: str, name: str) -> tuple[dict[str, Any], ...]:
    """Every behaviour-changing single-token mutation of `module.name`, as SWE instances."""
    spec = next(f for f in FUNCTIONS + BENCHMARK_FUNCTIONS if f[:2] == (module, name))
    path, source = _module_source(module)
    file_lines = source.splitlines(keepends=True)
    first, last = _function_span(source, name)
    func_lines = file_lines[first - 1:last]
    out = []
    for off, col, old, new in _sites("".join(func_lines)):
        buggy_func = _apply(func_lines, off, col, old, new)
        try:
            compile("".join(buggy_func), "<m>", "exec")
        except SyntaxError:
            continue
        symptom = None
        for args in spec[2]:
            want, got = _call(module, "".join(func_lines), name, args), _call(module, "".join(buggy_func), name, args)
            if want != got:
                shown = ", ".join(map(repr, args))
                symptom = f"`{module}.{name}({shown})` gives {got}, but it should give {want}."
                break
        if symptom is None:
            continue
        buggy_file = file_lines[: first - 1] + buggy_func + file_lines[last:]
        commit = hashlib.sha1(f"{module}.{name}:{off}:{col}:{new}".encode()).hexdigest()
        out.append({
            "module": module, "name": name, "path": path, "line": first + off, "old": old, "new": new,
            "buggy_file": buggy_file, "fixed_file": file_lines, "commit": commit, "symptom": symptom,
            "code_context": f"# {path} (lines {first}-{last})\n" + "".join(buggy_func),
            "golden_patch": _diff(buggy_file, file_lines, path),
        })
    return tuple(out)


ISSUE_OPENERS = ["Wrong result from `{q}`", "`{q}` returns an incorrect value", "Regression in `{q}`",
                 "Bug: `{q}` misbehaves on simple input"]


def _issue(rng: random.Random, m: dict[str, Any]) -> str:
    title = rng.choice(ISSUE_OPENERS).format(q=f"{m['module']}.{m['name']}")
    return f"{title}\n\n{m['symptom']}"


def _candidates(rng: random.Random, m: dict[str, Any], others: list[dict[str, Any]]) -> list[str]:
    """Eight teacher patches whose quality mix decides the SFT / RL / no-signal route."""
    golden, path = m["golden_patch"], m["path"]
    near = _diff(m["buggy_file"], m["fixed_file"], path, context=rng.choice([1, 2, 5]))
    sibling = next((o for o in others if o["path"] == path and o["line"] != m["line"]), None)
    # Fixes a different spot of the same file: related text, wrong edit.
    partial = sibling["golden_patch"] if sibling else None
    wrong_file = "--- a/setup.py\n+++ b/setup.py\n@@ -1,1 +1,1 @@\n-version = '1.0'\n+version = '1.0.1'\n"
    unparsable = golden.rsplit("\n", 3)[0] + "\n" if golden.count("\n") > 6 else "Change the comparison to fix it."
    prose = f"The bug is on line {m['line']}: `{m['new']}` should be `{m['old']}`."
    route = rng.choices(["sft", "rl", "none"], weights=[5, 4, 1])[0]
    good = {"sft": rng.randint(4, 7), "rl": rng.randint(1, 3), "none": 0}[route]
    pool_good = [golden, near]
    pool_bad = ([partial] if route != "none" and partial else []) + [wrong_file, unparsable, prose, ""]
    cands = [rng.choice(pool_good) for _ in range(good)] + [rng.choice(pool_bad) for _ in range(8 - good)]
    rng.shuffle(cands)
    return cands


def _all(module_list: list[tuple[str, str, list[tuple]]], held_out: bool | None = None) -> list[dict[str, Any]]:
    """Mutations of the listed functions; `held_out` True/False keeps only eval/training ones."""
    out = []
    for module, name, _ in module_list:
        if held_out is not None and (module in EVAL_MODULES) != held_out:
            continue
        try:
            out.extend(mutations(module, name))
        except (ImportError, LookupError, OSError, TypeError):
            continue  # module or function not available in this Python: skip it
    return out


def swe_item(pool: list[dict[str, Any]], rng: random.Random, repo: str = "python/cpython") -> dict[str, Any]:
    m = rng.choice(pool)
    return {"key": m["commit"], "m": m, "repo": repo}


def _instance(rng: random.Random, it: dict[str, Any], pool: list[dict[str, Any]], with_candidates: bool) -> dict[str, Any]:
    m = it["m"]
    row = {"repo": it["repo"], "base_commit": m["commit"], "issue": _issue(rng, m), "code_context": m["code_context"],
           "golden_patch": m["golden_patch"]}
    if with_candidates:
        row["candidate_patches"] = _candidates(rng, m, [o for o in pool if o is not m])
    return row


def swe_pool(seed: int) -> list:
    rng = make_rng("swe_pool", seed)
    pool = _all(FUNCTIONS, held_out=False)
    rows = [_instance(rng, it, pool, True) for it in draw(rng, 80, lambda r: swe_item(pool, r), ALL_SLOTS)]
    bench = _all(BENCHMARK_FUNCTIONS)
    extra = [_instance(rng, swe_item(bench, rng, "psf/requests"), bench, True) for _ in range(3)] if bench else []
    dups = [dict(r, candidate_patches=list(reversed(r["candidate_patches"]))) for r in rng.sample(rows, 3)]
    return interleave(rows, extra + dups, rng)


def swe_eval(seed: int) -> list:
    rng = make_rng("swe_eval", seed)
    pool = _all(FUNCTIONS, held_out=True)
    return [_instance(rng, it, pool, False) for it in draw(rng, 128, lambda r: swe_item(pool, r), ALL_SLOTS)]


GENERATORS = {"swe_pool": swe_pool, "swe_eval": swe_eval}
