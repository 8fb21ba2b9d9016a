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

from spec.yaml_load import YamlBoundsError, load_yaml

EXTENDS = "extends"
REMOVE = "remove"


class ExtendsError(ValueError):
    """An `extends:` that names no readable recipe, loops, or removes an entry the base lacks."""


def _named(items: Any) -> bool:
    return (isinstance(items, list) and bool(items)
            and all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in items))


def _merge_named(items: list[dict], child: list[dict], where: str) -> None:
    """Lay the named `child` entries over `items` in place (both already private copies)."""
    for entry in child:
        index = next((i for i, e in enumerate(items) if e["name"] == entry["name"]), None)
        if entry.get(REMOVE) is True and set(entry) == {"name", REMOVE}:
            if index is None:
                raise ExtendsError(f"{where}: cannot remove {entry['name']!r}: the base recipe has no such entry "
                                   f"(names: {', '.join(e['name'] for e in items) or 'none'})")
            del items[index]
        elif index is None:
            items.append(entry)
        else:
            _lay_over(items[index], entry, recipe_level=False)


def _lay_over(out: dict, child: dict, recipe_level: bool) -> None:
    """Merge `child` into `out` in place (both already private copies)."""
    for key, value in child.items():
        if recipe_level and key == EXTENDS:
            continue
        if recipe_level and _named(value) and _named(out.get(key)):
            _merge_named(out[key], value, key)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            _lay_over(out[key], value, recipe_level=False)
        else:
            out[key] = value


def merge_recipes(base: dict, child: dict) -> dict:
    """One recipe mapping from a base and an extending one (neither is changed; see the module docstring)."""
    out = copy.deepcopy(base)
    _lay_over(out, copy.deepcopy(child), recipe_level=True)
    return out


class RecipeFileError(ValueError):
    """A recipe file that is missing, unreadable or not YAML; the message names the file."""


def read_recipe_file(path: Path) -> Any:
    """The YAML data of a recipe file (the recipe itself or an `extends:` base).

    Read once and parsed from those bytes, aliases expanded under a bound (spec.yaml_load), so
    an anchor bomb fails here, naming the file, wherever in the recipe it sits.
    """
    try:
        return load_yaml(path.read_bytes().decode("utf-8"))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise RecipeFileError(f"recipe not found: {path}") from None
    except PermissionError:
        raise RecipeFileError(f"recipe {path} is not readable (permission denied)") from None
    except UnicodeDecodeError:
        raise RecipeFileError(f"recipe {path} is not UTF-8 text") from None
    except YamlBoundsError as err:
        raise RecipeFileError(f"invalid recipe {path}: {err}") from None
    except yaml.YAMLError as err:
        raise RecipeFileError(f"recipe {path} is not valid YAML: {err}") from None


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
    try:
        base = read_recipe_file(base_path)
    except RecipeFileError as err:
        raise ExtendsError(f"extends: {err} (named by {here})") from None
    if not isinstance(base, dict):
        raise ExtendsError(f"extends: recipe {base_path} (named by {here}): the top level must be a mapping")
    return merge_recipes(resolve_extends(base, base_path, chain), data)
