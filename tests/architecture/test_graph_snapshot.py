"""Snapshot of the asset graph of both shipped recipes: every key, its group, its parents and
its checks. A refactor that changes the graph shows exactly what moved; regenerate on purpose
with `CASCADE_UPDATE_SNAPSHOT=1 pytest tests/architecture/test_graph_snapshot.py`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from assets import build_definitions
from dagster_project.recipe import load_recipe

SNAPSHOTS = Path(__file__).parent / "snapshots"
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def graph_snapshot(recipe_path: Path) -> dict:
    """{asset key: {group, parents, checks}} of a recipe's Definitions, sorted."""
    graph = build_definitions(load_recipe(recipe_path)).resolve_asset_graph()
    checks: dict[str, list[str]] = {}
    for check in graph.asset_check_keys:
        checks.setdefault(check.asset_key.to_user_string(), []).append(check.name)
    out = {}
    for k in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(k)
        name = k.to_user_string()
        out[name] = {"group": node.group_name,
                     "parents": sorted(p.to_user_string() for p in node.parent_keys),
                     "checks": sorted(checks.get(name, []))}
    return out


@pytest.mark.parametrize("recipe", ["default", "tiny"])
def test_asset_graph_matches_snapshot(recipe: str) -> None:
    got = graph_snapshot(RECIPES / f"{recipe}.yaml")
    path = SNAPSHOTS / f"{recipe}.json"
    if os.environ.get("CASCADE_UPDATE_SNAPSHOT") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(path.read_text())
    added, removed = sorted(set(got) - set(want)), sorted(set(want) - set(got))
    changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    assert not (added or removed or changed), (
        f"asset graph changed: added {added}, removed {removed}, changed "
        f"{ {k: {'was': want[k], 'now': got[k]} for k in changed} }")
