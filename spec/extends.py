"""`extends:` — a recipe written as the changes to another recipe.

A team's variant of a shared recipe (a longer proof run, a bigger eval, one stage with another
reward) should not be a copy that drifts from the original. A recipe with `extends: FILE`
(relative to its own folder; chains are allowed, cycles are not) is the base recipe with the
extending file laid over it:

* mappings merge key by key, recursively (`train: {max_steps: 9}` changes one setting of a
  stage and keeps the rest);
* the recipe's top-level lists of named entries (`sources`, `benchmarks`, `generations`,
  `sft_stages`, `rl_stages`) merge entry by entry on `name`: an entry with a base entry's name
  is merged into it in place, a new name is appended, and `{name: X, remove: true}` drops X
  (an empty list replaces the base's list: `generations: []` declares none);
* every other value, lists inside an entry included (`rewards`, `sources` of a stage), replaces
  the base's value whole, so `rewards: [{name: ifeval_rm}]` means exactly that reward.

The result is an ordinary recipe mapping, validated like a single file (errors name the merged
field paths), so an extending recipe and the same recipe written out in full produce the same
assets and versions. Relative paths inside the base (reward files, local models) are resolved
against the extending recipe's folder, like its own; keep them under ${CASCADE_HOME} or absolute
when the two files live in different folders.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

EXTENDS = "extends"
REMOVE = "remove"


class ExtendsError(ValueError):
    """An `extends:` that names no readable recipe, loops, or removes an entry the base lacks."""


def _named(items: Any) -> bool:
    return (isinstance(items, list) and bool(items)
            and all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in items))


def _merge_named(base: list[dict], child: list[dict], where: str) -> list[dict]:
    out = [copy.deepcopy(e) for e in base]
    for entry in child:
        index = next((i for i, e in enumerate(out) if e["name"] == entry["name"]), None)
        if entry.get(REMOVE) is True and set(entry) == {"name", REMOVE}:
            if index is None:
                raise ExtendsError(f"{where}: cannot remove {entry['name']!r}: the base recipe has no such entry "
                                   f"(names: {', '.join(e['name'] for e in out) or 'none'})")
            del out[index]
        elif index is None:
            out.append(copy.deepcopy(entry))
        else:
            out[index] = merge_mappings(out[index], entry)
    return out


def merge_mappings(base: dict, child: dict, recipe_level: bool = False) -> dict:
    """`child` laid over `base`: mappings merge recursively, anything else in `child` replaces;
    at `recipe_level` the named lists merge on `name` and the `extends` key is left out."""
    out = copy.deepcopy(base)
    for key, value in child.items():
        if recipe_level and key == EXTENDS:
            continue
        if recipe_level and _named(value) and _named(out.get(key)):
            out[key] = _merge_named(out[key], value, key)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_mappings(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def merge_recipes(base: dict, child: dict) -> dict:
    """One recipe mapping from a base and an extending one (see the module docstring)."""
    return merge_mappings(base, child, recipe_level=True)


def _read(path: Path, by: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise ExtendsError(f"extends: recipe not found: {path} (named by {by})") from None
    except (PermissionError, UnicodeDecodeError):
        raise ExtendsError(f"extends: recipe {path} (named by {by}) is not readable UTF-8 text") from None
    except yaml.YAMLError as err:
        raise ExtendsError(f"extends: recipe {path} (named by {by}) is not valid YAML: {err}") from None


def resolve_extends(data: Any, path: Path | None, seen: tuple[Path, ...] = ()) -> Any:
    """`data` (the mapping read from `path`) with its `extends:` chain merged in; other data as is."""
    if not isinstance(data, dict) or EXTENDS not in data:
        return data
    target = data[EXTENDS]
    if not isinstance(target, str) or not target.strip():
        raise ExtendsError(f"extends: expected the path of a recipe file, got {target!r}")
    here = path.resolve() if path else Path.cwd() / "<recipe>"
    base_path = (here.parent / target).resolve()
    chain = (*seen, here)
    if base_path in chain:
        raise ExtendsError("extends: cycle: " + " -> ".join(str(p) for p in (*chain, base_path)))
    base = _read(base_path, here)
    if not isinstance(base, dict):
        raise ExtendsError(f"extends: recipe {base_path} (named by {here}): the top level must be a mapping")
    return merge_recipes(resolve_extends(base, base_path, chain), data)
