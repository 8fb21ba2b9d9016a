"""No dead code in the eight packages: every function, class, method, attribute, variable and
import they define is used somewhere (vulture, https://github.com/jendrikseipp/vulture).

"Used" counts a use anywhere in the repository's Python: the packages, tests/, benchmarks/ and
scripts/ (a test oracle or a benchmark helper is not dead); only definitions inside the
packages are reported. Dynamic uses vulture cannot see are accounted for three ways, each kept
narrow: decorators that register what they decorate (IGNORE_DECORATORS), objects named by
`"package.module:attr"` strings in the registries and in pyproject.toml (read from the source
here, so a new registry entry needs no edit), and tests/architecture/dead_code_whitelist.py for
the rest, one commented line each.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("spec", "curation", "sandboxes", "rewards", "generation", "trainer", "assets", "dagster_project")
USERS = ("tests", "benchmarks", "scripts")
WHITELIST = Path(__file__).with_name("dead_code_whitelist.py")

# Decorators whose functions are called by the library that the decorator hands them to.
IGNORE_DECORATORS = [
    "@field_validator", "@model_validator",  # pydantic runs them on validation
    "@_register",  # rewards/ifeval_checks.py: an IFEval instruction's check, looked up by instruction id
    "@atexit.register",  # run by the interpreter at exit
]

# "trainer.stage:run_grpo": how the registries name code without importing it (spec.entry_points).
ENTRY_POINT = re.compile(r"""["'](?:%s)(?:\.\w+)*:(\w+)["']""" % "|".join(PACKAGES))


def entry_point_names() -> set[str]:
    """The attribute of every `package.module:attr` string in the packages and pyproject.toml."""
    sources = [p for package in PACKAGES for p in (REPO / package).rglob("*.py")] + [REPO / "pyproject.toml"]
    return {name for path in sources for name in ENTRY_POINT.findall(path.read_text(encoding="utf-8"))}


def test_entry_point_strings_are_found() -> None:
    """The registry scan sees the registries (if it read nothing, every registered object would
    look dead, or a broken pattern would hide nothing and pass unnoticed)."""
    names = entry_point_names()
    assert {"main", "run"} <= names, sorted(names)  # pyproject's `cascade` script; the backends


def test_no_dead_code() -> None:
    import vulture  # pyproject's dev extra

    v = vulture.Vulture(ignore_decorators=IGNORE_DECORATORS)
    v.scavenge([str(REPO / d) for d in (*PACKAGES, *USERS) if (REPO / d).is_dir()] + [str(WHITELIST)])
    v.scan("\n".join(sorted(entry_point_names())) + "\n", filename="<registry entry points>")
    roots = tuple(str(REPO / package) + "/" for package in PACKAGES)
    dead = [item for item in v.get_unused_code(min_confidence=0) if str(item.filename).startswith(roots)]
    report = [f"{Path(item.filename).relative_to(REPO).as_posix()}:{item.first_lineno}: {item.message}"
              f" ({item.confidence}% confidence)" for item in dead]
    assert not report, (
        "dead code (delete it; a true dynamic use goes in tests/architecture/dead_code_whitelist.py with a comment):\n  "
        + "\n  ".join(sorted(report)))
