"""Content hashing: the one place versions come from.

- `stable_hash(value)`: blake2b over canonical JSON, for configs and input lists (the same
  config always gives the same version, whatever the key order).
- `file_digest(path)`: blake2b over a file's bytes, or over every file of a folder with its
  relative name (Hugging Face datasets and model folders are folders); a file that changes
  while it is hashed raises (spec.consistent_read, which also versions bytes that are parsed).
- `code_hash(*packages)`: blake2b over whole packages' source files (the data assets' code).
- `source_version(target)`: the digest of the code behind one `module:attr` or
  `path/file.py:attr` (its module, the local modules it imports, transitively, found by an
  `ast` walk without running anything, and its package's files for code outside this repo).
  Rewards are versioned by it, so a reward's version changes exactly when code it runs changes.
  Why an import walk, not a whole package: editing rewards/math.py must not re-version the code
  reward; why not the module alone: math's verdicts also come from curation/chat.py.
- `closure_version(targets)`: the same over several entry points (a checkpoint's training code).
- `object_source_version(obj)`: the same for the module an imported object comes from, checked
  against the code that was imported (its code objects must compile from the hashed bytes), so a
  file edited after the import raises rather than versioning code that does not run.

Table contents are hashed column by column in `curation.versioning.content_hash`, which needs
pyarrow's buffers; everything else hashes here.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import inspect
import json
import sys
import sysconfig
from pathlib import Path
from types import CodeType
from typing import Any, Sequence

from spec.consistent_read import FileChangedError, file_state
from spec.paths import REPO_ROOT


def stable_hash(value: Any, length: int = 16) -> str:
    """blake2b over canonical JSON (sorted keys, no whitespace), cut to `length` hex digits.

    >>> stable_hash({"b": 1, "a": [1, 2]}) == stable_hash({"a": [1, 2], "b": 1})
    True
    """
    blob = json.dumps(value, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()[:length]


def file_digest(path: str | Path) -> str:
    """Content hash of a file, or of every file in a folder (names relative to it, sorted).

    FileChangedError (spec.consistent_read) if it changed while it was hashed; to version bytes
    that are also parsed, use `spec.consistent_read.read_consistent`.
    """
    return file_state(path).digest


_CODE_HASHES: dict[tuple[str, ...], str] = {}


def code_hash(*packages: str) -> str:
    """Hash of the Python sources of the given top-level packages (cached per process)."""
    key = tuple(sorted(packages))
    if key not in _CODE_HASHES:
        h = hashlib.blake2b(digest_size=8)
        for pkg in key:
            for f in sorted((REPO_ROOT / pkg).rglob("*.py")):
                h.update(str(f.relative_to(REPO_ROOT)).encode())
                h.update(f.read_bytes())
        _CODE_HASHES[key] = h.hexdigest()
    return _CODE_HASHES[key]


def code_version(packages: Sequence[str], config: Any) -> str:
    """Code version of a piece of work: the library code it runs + the config slice it reads."""
    return f"{code_hash(*packages)}-{stable_hash(config, 8)}"


# --- Source versions: the digest of the code behind a `module:attr` / `file.py:attr` target ---

PLATFORM_PACKAGES = ("spec", "curation", "sandboxes", "rewards", "generation", "trainer", "assets", "dagster_project")
"""This repository's packages: imports of them are followed into REPO_ROOT from any code."""
_SITE_DIRS = ("site-packages", "dist-packages")


class SourceNotFoundError(ValueError):
    """A target whose source file cannot be located without running it (built-in, C, REPL)."""


def _read(path: Path) -> bytes:
    """A file's bytes (one function, so tests can fake an edit)."""
    return path.read_bytes()


# Per process, keyed by file and its stat stamp (_stamp): an edited file is re-read, others are not.
_FILES: dict[Path, tuple[tuple[int, ...] | None, str, tuple[tuple[int, str], ...]]] = {}


def _scan(path: Path) -> tuple[str, tuple[tuple[int, str], ...]]:
    """(content digest, imports as (level, dotted name)) of a file, cached while it is unchanged."""
    stamp = _stamp(path)
    known = _FILES.get(path)
    if known and known[0] == stamp:
        return known[1], known[2]
    data = _read(path)
    imports: list[tuple[int, str]] = []
    if path.suffix == ".py":
        try:
            tree = ast.parse(data, filename=str(path))
        except (SyntaxError, ValueError):  # still versioned by its bytes
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):  # every import, lazy ones inside functions included
            if isinstance(node, ast.Import):
                imports += [(0, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                imports.append((node.level, base))
                imports += [(node.level, f"{base}.{a.name}" if base else a.name) for a in node.names if a.name != "*"]
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    _FILES[path] = (stamp, digest, tuple(imports))
    return digest, tuple(imports)


def _walk_module(root: Path, dotted: str) -> list[Path]:
    """The files Python runs to import `dotted` from `root`: each package's __init__, then the module."""
    files, folder = [], root
    for part in dotted.split("."):
        if (folder / part / "__init__.py").is_file():
            folder = folder / part
            files.append(folder / "__init__.py")
        elif (folder / f"{part}.py").is_file():
            files.append(folder / f"{part}.py")
            break  # anything after a module is an attribute
        elif (folder / part).is_dir():  # namespace package
            folder = folder / part
        else:
            break
    return files


class _Scope:
    """Where a target's local imports resolve: its home folder and this repository's packages."""

    def __init__(self, file: Path) -> None:
        top = file.parent
        while (top / "__init__.py").is_file() and (top.parent / "__init__.py").is_file():
            top = top.parent
        self.package = top if (top / "__init__.py").is_file() else None  # its top-level package
        self.home = top.parent if self.package else file.parent
        self.platform = any(_under(file, REPO_ROOT / p) for p in PLATFORM_PACKAGES)
        self.own = self.package.name if self.package else file.stem
        self.site = _installed(self.home)  # installed code: never follow into its neighbours

    def roots(self, top: str) -> list[Path]:
        """Folders an import of top-level name `top` is looked up in (none: not local code)."""
        if top in PLATFORM_PACKAGES and (REPO_ROOT / top).exists():
            return [REPO_ROOT]
        if self.platform or (self.site and top != self.own):
            return []
        return [self.home]

    def label(self, path: Path) -> str:
        """A file's name in the digest: relative to the folder it was found from."""
        for base in (REPO_ROOT, self.home) if self.platform else (self.home, REPO_ROOT):
            if _under(path, base):
                return path.relative_to(base).as_posix()
        return path.name


def _installed(folder: Path) -> bool:
    """Whether `folder` is where Python installs code (site-packages, the standard library)."""
    paths = sysconfig.get_paths()
    return folder.name in _SITE_DIRS or any(
        folder == Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _package_parts(path: Path, scope: _Scope) -> list[str]:
    """The dotted package of a file (for relative imports), from the folder it lives under."""
    for base in (REPO_ROOT, scope.home) if scope.platform else (scope.home, REPO_ROOT):
        if _under(path, base):
            return list(path.relative_to(base).parent.parts)
    return []


def _locate(target: str) -> Path:
    """The source file of a target's module, found without running it."""
    from spec.entry_points import is_file_target, split_target, target_path

    module = split_target(target)[0] if ":" in target else target
    if is_file_target(target):
        path = target_path(module)
        if not path.is_file():
            raise SourceNotFoundError(f"{target!r}: no file {path}")
        return path
    loaded = sys.modules.get(module)
    origin = getattr(loaded, "__file__", None) if loaded else None
    if origin is None:
        origin = _find_source(module)
    if origin is None or not Path(origin).is_file():
        raise SourceNotFoundError(f"{target!r}: cannot locate the source of module {module!r}")
    return Path(origin).resolve()


def _find_source(module: str) -> str | None:
    """The .py file of a dotted module name, found without importing it or its packages.

    The top level goes through importlib's finders (which run nothing); below it, the
    package folders are searched directly, as the import system would, for source modules.
    """
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return spec.origin if spec.has_location else None
    folders = [Path(p) for p in (spec.submodule_search_locations or [])]
    for i, part in enumerate(rest):
        last, below = i == len(rest) - 1, []
        for folder in folders:
            if (folder / part / "__init__.py").is_file():
                if last:
                    return str(folder / part / "__init__.py")
                below = [folder / part]
                break
            if (folder / f"{part}.py").is_file():
                return str(folder / f"{part}.py") if last else None
            if (folder / part).is_dir():  # a namespace package spans every folder holding it
                below.append(folder / part)
        folders = below
    return None


def source_files(target: str) -> list[Path]:
    """Every file a target's version covers, sorted: the target's module file, the modules it
    imports that are local (transitively, by an `ast` walk of its `import` / `from ... import`
    statements anywhere in the file, lazy ones inside functions included, never running anything)
    and, for code outside this repository that lives in a package, every file of that package.
    "Local" means: this repository's packages (PLATFORM_PACKAGES), and for other code the modules
    beside it (its folder, or the folder holding its package), except in site-packages. Dynamic
    imports (`importlib.import_module(name)`, `module:attr` strings) are not seen: name them as
    further entry points (`closure_version`).
    """
    return _closure(_locate(target))


def _closure(root: Path) -> list[Path]:
    scope = _Scope(root)
    found: set[Path] = {root}
    if scope.package is not None and not scope.platform:  # all its files (installed: its sources)
        found |= {p.resolve() for p in scope.package.rglob("*.py" if scope.site else "*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")}
    todo = [p for p in found if p.suffix == ".py"]
    seen = set(todo)
    while todo:
        path = todo.pop()
        package = _package_parts(path, scope)
        for level, name in _scan(path)[1]:
            if level:  # relative: from the file's package, `level - 1` folders up
                if level - 1 > len(package):
                    continue
                name = ".".join([*package[:len(package) - level + 1], *([name] if name else [])])
            if not name:
                continue
            for base in scope.roots(name.split(".")[0]):
                for f in _walk_module(base, name):
                    f = f.resolve()
                    found.add(f)
                    if f not in seen:
                        seen.add(f)
                        todo.append(f)
    return sorted(found)


def _stamp(path: Path) -> tuple[int, ...] | None:
    """(mtime, size, inode, ctime): ctime and inode also change on a rewrite that keeps mtime and size."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_ctime_ns


# root file -> (stamps of its files and of their folders, (label, digest) of each file). A folder's
# stamp changes when a file appears in it, so a new sibling module or package file is noticed too.
_DIGESTS: dict[Path, tuple[tuple[tuple[Path, tuple[int, ...] | None], ...], tuple[tuple[str, str], ...]]] = {}


def _entries(root: Path) -> tuple[tuple[str, str], ...]:
    """(name relative to its home folder, content digest) of each file of `root`'s closure; re-checked
    on every call by the files' (and folders') stat stamps: an edit is seen at once, a hit costs `stat`s."""
    known = _DIGESTS.get(root)
    if known is None or any(_stamp(p) != stamp for p, stamp in known[0]):
        scope, files = _Scope(root), _closure(root)
        watched = sorted({*files, *(f.parent for f in files)})
        known = _DIGESTS[root] = (tuple((p, _stamp(p)) for p in watched), tuple((scope.label(f), _scan(f)[0]) for f in files))
    return known[1]


def _digest(entries: Sequence[tuple[str, str]], length: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    for label, digest in entries:
        h.update(label.encode() + b"\0" + digest.encode() + b"\n")
    return h.hexdigest()[:length]


def source_version(target: str, length: int = 12) -> str:
    """Digest of the code behind `target` (`module`, `module:attr`, `path/file.py[:attr]`): its
    `source_files`, named relative to their home folder (a moved checkout keeps its versions)."""
    return _digest(_entries(_locate(target)), length)


def closure_version(targets: Sequence[str], length: int = 16) -> str:
    """`source_version` of several entry points together (the union of their closures, each file
    once): the code a checkpoint's training runs (assets.checkpoints), or an eval domain's scoring
    (assets.evals); editing a module none of them imports (the report, the CLI) leaves them fresh."""
    return _digest(sorted({e for t in dict.fromkeys(targets) for e in _entries(_locate(t))}), length)


def object_source_version(obj: Any, length: int = 12) -> str:
    """`source_version` of the module that defines `obj` (a class, function or instance).

    The version is of the code that was imported, not merely of the file now on disk: the
    module file's bytes that went into the version are compiled and `obj`'s own code (a
    function's, a class's methods') must be among them, so a file edited after its module was
    imported raises FileChangedError instead of versioning code that is not running.
    """
    target = obj if inspect.isclass(obj) or inspect.isroutine(obj) else type(obj)
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if not path:
        raise SourceNotFoundError(f"{obj!r}: its module has no source file")
    root = Path(path).resolve()
    version, digest = source_version(str(root), length), _scan(root)[0]
    data = _read(root)  # the bytes the version covers, compiled below
    if hashlib.blake2b(data, digest_size=16).hexdigest() != digest or source_version(str(root), length) != version:
        raise FileChangedError(f"{root} changed while it was versioned; rerun when it is stable")
    stale = _stale_code(target, root, data)
    if stale:
        raise FileChangedError(f"{root} changed after its module was imported ({', '.join(sorted(set(stale)))} "
                               "differ from the file): the version would not be the running code's; rerun when it is stable")
    return version


def _stale_code(target: Any, root: Path, data: bytes) -> list[str]:
    """Names of `target`'s own code objects from `root` that `data` (the file's bytes) no longer compiles to."""
    return [c.co_name for c in _own_code(target) if Path(c.co_filename).resolve() == root and c not in _compiled(root, data)]


def runs_file_code(obj: Any) -> bool:
    """Whether `obj` (a function or class) is the code its module's file holds now: False once the
    file was edited after the module was imported (spec.entry_points then reloads it)."""
    target = obj if inspect.isclass(obj) or inspect.isroutine(obj) else type(obj)
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if not path or not Path(path).is_file():
        return True
    root = Path(path).resolve()
    return not _stale_code(target, root, _read(root))


_COMPILED: dict[tuple[Path, bytes], frozenset[CodeType]] = {}


def _compiled(root: Path, data: bytes) -> frozenset[CodeType]:
    """Every code object (nested ones included) of `data` compiled as Python imports it."""
    key = (root, hashlib.blake2b(data, digest_size=16).digest())
    if key not in _COMPILED:
        try:
            todo = [compile(data, str(root), "exec", dont_inherit=True)]
        except (SyntaxError, ValueError):
            todo = []
        found: set[CodeType] = set()
        while todo:
            code = todo.pop()
            found.add(code)
            todo += [c for c in code.co_consts if isinstance(c, CodeType)]
        _COMPILED[key] = frozenset(found)
    return _COMPILED[key]


def _own_code(target: Any) -> list[CodeType]:
    """A function's code object, or those of a class's own methods and properties."""
    members = [target] if inspect.isroutine(target) else list(vars(target).values())
    out = []
    for m in members:
        for f in (m.fget, m.fset, m.fdel) if isinstance(m, property) else (getattr(m, "__func__", m),):
            code = getattr(f, "__code__", None)
            if isinstance(code, CodeType):
                out.append(code)
    return out
