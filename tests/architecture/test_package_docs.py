"""Every package's docstring lists its modules, and the list is true.

Each `__init__.py` of the eight packages (and of their subpackages) has a block

    Modules:
      name.py      what it holds, in one line
      sub/         a subpackage (its own docstring lists its modules)

one line per module, two spaces in, ending at the first blank line. The test compares each block
with the files in the folder both ways: a module added without a line, or a line left behind
by a module that went, fails with the names.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("spec", "curation", "sandboxes", "rewards", "generation", "trainer", "assets", "dagster_project")
ENTRY = re.compile(r"  (\w+\.py|\w+/) +\S")


def packages() -> list[Path]:
    """Every package folder (an `__init__.py` inside) under the eight top-level packages."""
    return sorted(init.parent for top in PACKAGES for init in (REPO / top).rglob("__init__.py")
                  if "__pycache__" not in init.parts)


def listed_modules(docstring: str) -> list[str]:
    """The names in the docstring's `Modules:` block (ValueError when it has none or a line is malformed)."""
    lines = docstring.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Modules:")
    except StopIteration:
        raise ValueError("no `Modules:` block") from None
    names = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        if not (m := ENTRY.match(line)):
            raise ValueError(f"not a `  name.py  description` line: {line!r}")
        names.append(m.group(1))
    if not names:
        raise ValueError("an empty `Modules:` block")
    return names


def present_modules(package: Path) -> set[str]:
    """The package's modules (`__init__.py` aside) and its subpackages (`name/`)."""
    return ({p.name for p in package.glob("*.py") if p.name != "__init__.py"}
            | {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()})


def test_every_package_is_found() -> None:
    found = {p.relative_to(REPO).as_posix() for p in packages()}
    assert set(PACKAGES) | {"curation/samples", "trainer/backends"} <= found, sorted(found)


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_package_docstring_lists_its_modules(package: Path) -> None:
    rel = package.relative_to(REPO).as_posix()
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    try:
        listed = listed_modules(docstring)
    except ValueError as err:
        pytest.fail(f"{rel}/__init__.py: {err}")
    present = present_modules(package)
    duplicated = sorted({n for n in listed if listed.count(n) > 1})
    missing = sorted(present - set(listed))
    stale = sorted(set(listed) - present)
    assert not (missing or stale or duplicated), (
        f"{rel}/__init__.py's `Modules:` block disagrees with the folder:"
        + (f"\n  not listed: {', '.join(missing)}" if missing else "")
        + (f"\n  listed but no such module: {', '.join(stale)}" if stale else "")
        + (f"\n  listed twice: {', '.join(duplicated)}" if duplicated else ""))


def test_the_parser_reads_a_block_and_rejects_a_malformed_line() -> None:
    doc = "Title.\n\nModules:\n  a.py     one\n  sub/     two\n\nMore text.\n  c.py  not in the block\n"
    assert listed_modules(doc) == ["a.py", "sub/"]
    with pytest.raises(ValueError, match="not a"):
        listed_modules("Modules:\n  a.py one\n    continued\n")
    with pytest.raises(ValueError, match="no `Modules:`"):
        listed_modules("Title only.")
