"""A Dagster Component that turns a recipe file into the cascade's assets.

For projects laid out the `dg` way: a `defs.yaml` with
    type: dagster_project.component.CascadeRecipe
    attributes: {recipe: recipes/default.yaml}
yields the same Definitions as `dagster_project.definitions`.
"""

from __future__ import annotations

import dagster as dg

from assets import build_definitions
from dagster_project.recipe import load_recipe


class CascadeRecipe(dg.Component, dg.Model, dg.Resolvable):
    """All sources, corpora, checkpoints and evals declared by one Cascade recipe."""

    recipe: str | None = None
    """Recipe YAML, relative to the component's folder (default: $CASCADE_RECIPE or recipes/default.yaml)."""

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        path = None
        if self.recipe:
            path = context.path / self.recipe if not self.recipe.startswith("/") else self.recipe
        return build_definitions(load_recipe(path))
