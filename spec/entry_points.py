"""`module:attr` strings -> objects, imported only when used.

Registries (stage kinds' trainers, rewards, training backends) name their code by such strings,
so importing a registry imports none of the heavy modules it points at, and a lower layer can
name code of a higher one without importing it.
"""

from __future__ import annotations

import importlib
from typing import Any


class EntryPointError(ValueError):
    """A `module:attr` string that is malformed or does not import."""


def check_target(target: str) -> str:
    """`target` if it has the `module:attr` shape; raise EntryPointError otherwise."""
    module, sep, attr = target.partition(":")
    if not (module and sep and attr):
        raise EntryPointError(f"an entry point must be 'module:attr', got {target!r}")
    return target


def import_target(target: str) -> Any:
    """The object `module:attr` names (the module is imported now)."""
    module, _, attr = check_target(target).partition(":")
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
