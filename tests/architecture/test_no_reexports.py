"""No re-export shims: every name is imported from the module that defines it.

A shim is a module that lists in `__all__` (or exists only to forward) a name it merely imports
from another module, so callers import the name from the wrong place and the module that defines
it has two front doors. Three checks, all on the syntax tree (nothing is imported):

1. each `__all__` entry of a module of the eight packages is defined there: a def, a class or an
   assignment at module level;
2. no package `__init__.py` imports a name from its own submodules without using it: the package
   re-exports nothing (callers import from the submodule);
3. no module of the repository (the packages, tests/, benchmarks/, scripts/) imports a name from
   one of the eight packages' modules that only imports it itself.

In check 3, a name bound by an import inside a module-level `if` or `try` (a choice between
implementations, e.g. `pyarrow._compute` or `pyarrow.compute`) counts as the module's own: it is
the module's decision, not a forwarded name. Check 1 stays strict: `__all__` lists only what the
module defines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("spec", "curation", "sandboxes", "rewards", "generation", "trainer", "assets", "dagster_project")
IMPORTERS = (*PACKAGES, "tests", "benchmarks", "scripts")


@dataclass
class Module:
    """What one module binds at module level, from its syntax tree."""

    name: str
    """Dotted module name (`curation.dedup`; a package is its `__init__`'s dotted name)."""
    path: str
    """Path relative to the repository."""
    tree: ast.Module
    defined: set[str] = field(default_factory=set)
    """Names bound by a def, a class or an assignment at module level (inside if/try/with too)."""
    chosen: set[str] = field(default_factory=set)
    """Names bound by an import inside a module-level if/try/with block."""
    imported: dict[str, str] = field(default_factory=dict)
    """{bound name: the module it was imported from} for every module-level import."""
    exported: list[str] = field(default_factory=list)
    """The `__all__` entries, in order."""


def _targets(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _import_source(node: ast.Import | ast.ImportFrom, alias: ast.alias, package: str) -> str:
    if isinstance(node, ast.Import):
        return alias.name
    if node.level:  # relative: resolve against the package
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def analyse(name: str, path: str, source: str) -> Module:
    """The module-level bindings and the `__all__` of `source` (module `name`)."""
    tree = ast.parse(source, filename=path)
    module = Module(name, path, tree)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]

    def visit(body: list[ast.stmt], nested: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                module.defined.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    module.defined |= _targets(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                module.defined |= _targets(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    module.imported[bound] = _import_source(node, alias, package)
                    if nested:
                        module.chosen.add(bound)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(node, block, None) or [], True)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, True)
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and "__all__" in _targets(
                    node.targets[0] if isinstance(node, ast.Assign) else node.target):
                if node.value is not None:
                    module.exported += list(ast.literal_eval(node.value))

    visit(tree.body, False)
    module.defined.discard("__all__")
    return module


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files(tops: tuple[str, ...]) -> list[Path]:
    return sorted(p for top in tops for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


@cache
def modules() -> dict[str, Module]:
    """Every module of the eight packages, by dotted name."""
    return {_module_name(p): analyse(_module_name(p), p.relative_to(REPO).as_posix(), p.read_text(encoding="utf-8"))
            for p in _files(PACKAGES)}


def shims(module: Module) -> list[str]:
    """`file: name (imported from module)` for each `__all__` entry the module does not define."""
    return [f"{module.path}: {name} ({_origin(module, name)})"
            for name in module.exported if name not in module.defined]


def _origin(module: Module, name: str) -> str:
    return f"imported from {module.imported[name]}" if name in module.imported else "not defined"


def init_reexports(module: Module) -> list[str]:
    """For a package `__init__`: the names it imports from its own submodules and never uses."""
    if not module.path.endswith("__init__.py"):
        return []
    skip = {id(n) for node in module.tree.body
            if isinstance(node, ast.Assign) and "__all__" in _targets(node.targets[0]) for n in ast.walk(node)}
    used = {n.id for n in ast.walk(module.tree) if isinstance(n, ast.Name) and id(n) not in skip}
    return [f"{module.path}: {bound} (imported from {source})" for bound, source in sorted(module.imported.items())
            if source.startswith(module.name + ".") or source == module.name
            if bound not in used]


def forwarded_imports(path: str, source: str, table: dict[str, Module]) -> list[str]:
    """`path:line: from M import name (defined in X)` for each name imported from a module of the
    packages that does not define it (a submodule of a package is fine)."""
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in table):
            continue
        target = table[node.module]
        for alias in node.names:
            name = alias.name
            if name == "*":
                found.append(f"{path}:{node.lineno}: from {node.module} import * (import names from where they live)")
            elif name not in target.defined | target.chosen and f"{node.module}.{name}" not in table:
                where = f"defined in {target.imported[name]}" if name in target.imported else "not defined there"
                found.append(f"{path}:{node.lineno}: from {node.module} import {name} ({where})")
    return found


def test_all_lists_only_names_the_module_defines() -> None:
    found = [line for module in modules().values() for line in shims(module)]
    assert not found, "`__all__` entries the module only imports (import them from their module):\n" + "\n".join(found)


def test_package_inits_reexport_nothing() -> None:
    found = [line for module in modules().values() for line in init_reexports(module)]
    assert not found, "package __init__.py imports for re-export (import from the submodule):\n" + "\n".join(found)


def test_nothing_is_imported_through_a_module_that_only_imports_it() -> None:
    table = modules()
    found = [line for p in _files(IMPORTERS)
             for line in forwarded_imports(p.relative_to(REPO).as_posix(), p.read_text(encoding="utf-8"), table)]
    assert not found, "names imported from a module that does not define them:\n" + "\n".join(found)


def test_the_checks_find_a_shim() -> None:
    """The checks above see each kind of shim (so an empty finding means something)."""
    shim = analyse("pkg.shim", "pkg/shim.py",
                   "from pkg.impl import helper\nfrom pkg.other import used\nX = used()\n"
                   "def own():\n    pass\n__all__ = ['X', 'helper', 'own', 'ghost']\n")
    assert shims(shim) == ["pkg/shim.py: helper (imported from pkg.impl)", "pkg/shim.py: ghost (not defined)"]
    init = analyse("pkg", "pkg/__init__.py", "from pkg.impl import helper, used\nfrom .rel import thing\n"
                                             "used()\n__all__ = ['helper', 'thing']\n")
    assert init_reexports(init) == ["pkg/__init__.py: helper (imported from pkg.impl)",
                                    "pkg/__init__.py: thing (imported from pkg.rel)"]
    table = {"pkg.shim": shim, "pkg.impl": analyse("pkg.impl", "pkg/impl.py", "def helper():\n    pass\n"),
             "pkg": init}
    assert forwarded_imports("user.py", "from pkg.shim import helper, own\nfrom pkg import impl\n", table) == [
        "user.py:1: from pkg.shim import helper (defined in pkg.impl)"]
