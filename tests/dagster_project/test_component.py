"""dagster_project.component.CascadeRecipe builds the same definitions as dagster_project.definitions
(the README's claim for `dg`-style projects)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _graph(defs) -> tuple[set, set]:
    graph = defs.resolve_asset_graph()
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    return {k.to_user_string() for k in graph.get_all_asset_keys()}, checks


@pytest.mark.parametrize("recipe", ["recipes/default.yaml", "recipes/tiny.yaml"])
def test_component_yields_the_recipe_definitions(recipe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from assets import build_definitions
    from dagster_project.component import CascadeRecipe
    from dagster_project.recipe import load_recipe

    monkeypatch.delenv("CASCADE_RECIPE", raising=False)
    # relative to the component's folder, as a defs.yaml attribute is
    built = CascadeRecipe(recipe=recipe).build_defs(SimpleNamespace(path=ROOT))
    assets, checks = _graph(built)
    assert (assets, checks) == _graph(build_definitions(load_recipe(ROOT / recipe)))
    assert "checkpoints/math_rl" in assets and ("checkpoints/math_rl", "no_forgetting") in checks


def test_component_without_a_recipe_is_the_code_location(monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_project.component import CascadeRecipe
    from dagster_project.definitions import defs

    monkeypatch.delenv("CASCADE_RECIPE", raising=False)
    assert _graph(CascadeRecipe().build_defs(SimpleNamespace(path=ROOT))) == _graph(defs)
