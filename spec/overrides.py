"""`--set field.path=value` overrides, applied to the raw recipe before it is validated.

A team tries `max_steps: 20` for one stage without editing the shared recipe file:
`cascade run --set rl_stages.math_rl.train.max_steps=20`. The path walks mappings by key and
lists by index or by the `name` of an entry (`rl_stages.math_rl`, `sources.math_prompts`);
the value is parsed as YAML (`20` is an int, `1e-5` a float, `[think]` a list, `"20"` a
string). Overrides are applied to the mapping the YAML gave, so the result is validated exactly
like the file (a wrong type or an unknown key fails at load, naming its path), and the
overrides are kept in canonical form (list indexes replaced by entry names) so the lineage of
what they produced can record them.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import yaml

from spec.yaml_load import YamlBoundsError, load_yaml


class OverrideError(ValueError):
    """A `--set` that is malformed or points nowhere."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], parsed value).

    >>> parse_override("rl_stages.math_rl.train.max_steps=20")
    (['rl_stages', 'math_rl', 'train', 'max_steps'], 20)
    >>> parse_override("rl_stages.0.train.learning_rate=1e-5")[1], parse_override("name='1e-5'")[1]
    (1e-05, '1e-5')
    """
    path, sep, raw = text.partition("=")
    keys = path.strip().split(".")
    if not sep or not all(k.strip() for k in keys):
        raise OverrideError(f"--set {text!r}: expected FIELD.PATH=VALUE, e.g. rl_stages.math_rl.train.max_steps=20")
    try:
        value = load_yaml(raw) if raw.strip() else ""  # bounded: a value may hold anchors too
    except YamlBoundsError as err:
        raise OverrideError(f"--set {text!r}: {err}") from None
    except yaml.YAMLError as err:
        raise OverrideError(f"--set {text!r}: the value is not valid YAML: {err}") from None
    if isinstance(value, str) and value == raw.strip():  # unquoted: YAML 1.1 reads `1e-5` as text
        try:
            value = float(value)
        except ValueError:
            pass
    return [k.strip() for k in keys], value


def _list_index(items: list, key: str, where: str) -> tuple[int, str]:
    """Index and canonical key (the entry's name when it has one) of `key` in `items`."""
    if key.isdigit() and int(key) < len(items):
        entry = items[int(key)]
        name = entry.get("name") if isinstance(entry, dict) else None
        return int(key), name if isinstance(name, str) else key
    for i, entry in enumerate(items):
        if isinstance(entry, dict) and entry.get("name") == key:
            return i, key
    names = [e.get("name") for e in items if isinstance(e, dict) and e.get("name")]
    raise OverrideError(f"--set {where}: no entry {key!r} (names: {', '.join(map(str, names)) or 'none'}; "
                        f"or an index below {len(items)})")


def apply_overrides(data: dict, overrides: Sequence[str]) -> tuple[dict, dict[str, Any]]:
    """A copy of `data` with every override applied, and {canonical path: value}."""
    out = copy.deepcopy(data)
    applied: dict[str, Any] = {}
    for text in overrides:
        keys, value = parse_override(text)
        node: Any = out
        canonical: list[str] = []
        for depth, key in enumerate(keys):
            where = ".".join(keys[: depth + 1])
            last = depth == len(keys) - 1
            if isinstance(node, list):
                index, name = _list_index(node, key, where)
                canonical.append(name)
                if last:
                    node[index] = value
                else:
                    node = node[index]
            elif isinstance(node, dict):
                canonical.append(key)
                if last:
                    node[key] = value
                    continue
                if node.get(key) is None:
                    node[key] = {}
                node = node[key]
            else:
                raise OverrideError(f"--set {where}: {'.'.join(keys[:depth])} is a value, not a block")
        applied[".".join(canonical)] = value
    return out, applied


def overrides_for(overrides: dict[str, Any], section: str | None = None, stage: str | None = None) -> dict[str, Any]:
    """The overrides that shape one output: those inside its own block (`section` is
    `sft_stages`, `rl_stages` or `reward_model`; `stage` its name) and the recipe-wide ones
    (seed, model, curation, ...); other stages' blocks are left out.

    >>> overrides_for({"seed": 1, "rl_stages.math_rl.train.max_steps": 20, "rl_stages.code_rl.x": 1},
    ...               "rl_stages", "math_rl")
    {'seed': 1, 'rl_stages.math_rl.train.max_steps': 20}
    """
    own = {}
    for path, value in overrides.items():
        head, _, rest = path.partition(".")
        if head == "reward_model":
            keep = section == "reward_model"
        elif head in ("sft_stages", "rl_stages"):
            keep = head == section and rest.partition(".")[0] == stage
        else:
            keep = True
        if keep:
            own[path] = value
    return own
