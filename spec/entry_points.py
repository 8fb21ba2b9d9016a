"""`module:attr` (or `path/to/file.py:attr`) strings -> objects, imported only when used.

Registries (stage kinds' trainers, rewards, training backends) name their code by such strings,
so importing a registry imports none of the heavy modules it points at, and a lower layer can
name code of a higher one without importing it.

Two shapes of target:
- `package.module:attr` imports the module the usual way (it must be on `sys.path`).
- `path/to/file.py:attr` loads that file (user code that is not installed). A relative path
  resolves against the current working directory; `~` expands; an absolute path works from
  anywhere. The file runs as a module of its own, named after its resolved path (so two files
  called `rewards.py` never collide), and its folder is appended to `sys.path` so it can import
  the modules beside it. A file edited since it was loaded is loaded again on the next lookup,
  so the code that runs is the code whose source digest (spec.hashing.source_version) versions it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


class EntryPointError(ValueError):
    """A `module:attr` string that is malformed or does not import."""


def split_target(target: str) -> tuple[str, str]:
    """(module or file path, attr) of `target`; raise EntryPointError on a malformed one.

    >>> split_target("rewards.math:MathReward"), split_target("my/rewards.py:score")
    (('rewards.math', 'MathReward'), ('my/rewards.py', 'score'))
    """
    # The attr never contains ':', a path might (rarely): split at the last one.
    module, sep, attr = target.rpartition(":") if is_file_target(target) else target.partition(":")
    if not (module and sep and attr):
        raise EntryPointError(f"an entry point must be 'module:attr' or 'path/to/file.py:attr', got {target!r}")
    return module, attr


def is_file_target(target: str) -> bool:
    """Whether `target` names a file (`x.py:attr`, or a module part with a path separator)."""
    module = target.rpartition(":")[0] if ":" in target else target
    return module.endswith(".py") or "/" in module or "\\" in module


def target_path(module: str) -> Path:
    """The absolute file a file target's module part names (relative to the working directory)."""
    return (Path.cwd() / Path(module).expanduser()).resolve()


def check_target(target: str) -> str:
    """`target` if it has the `module:attr` (or `file.py:attr`) shape; raise EntryPointError otherwise."""
    split_target(target)
    return target


_FILE_MODULES: dict[Path, tuple[tuple[int, int], ModuleType]] = {}


def load_file_module(path: Path) -> ModuleType:
    """The module of a Python file, (re)loaded when the file changed since the last load."""
    try:
        stat = path.stat()
    except OSError as err:
        raise EntryPointError(f"cannot load {str(path)!r}: {err.strerror or err}") from None
    stamp = (stat.st_mtime_ns, stat.st_size)
    known = _FILE_MODULES.get(path)
    if known and known[0] == stamp:
        return known[1]
    digest = hashlib.blake2b(str(path).encode(), digest_size=4).hexdigest()
    name = "_cascade_file_" + re.sub(r"\W", "_", path.stem) + "_" + digest
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EntryPointError(f"cannot load {str(path)!r}: not a Python source file")
    if str(path.parent) not in sys.path:  # its sibling modules import like a script's
        sys.path.append(str(path.parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and typing look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any error in user code is "does not import"
        sys.modules.pop(name, None)
        raise EntryPointError(f"cannot load {str(path)!r}: {type(err).__name__}: {err}") from None
    _FILE_MODULES[path] = (stamp, module)
    return module


def import_target(target: str) -> Any:
    """The object `module:attr` (or `file.py:attr`) names (the module is imported now)."""
    module, attr = split_target(target)
    if is_file_target(target):
        obj: Any = load_file_module(target_path(module))
        module = obj.__name__
    else:
        try:
            obj = importlib.import_module(module)
        except ImportError as err:
            raise EntryPointError(f"cannot import {target!r}: {err}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EntryPointError(f"cannot import {target!r}: {module} has no attribute {attr!r}") from None
    return obj
