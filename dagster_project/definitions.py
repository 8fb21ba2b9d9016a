"""Dagster code location: the asset graph of the active recipe.

`dagster dev -m dagster_project.definitions` (or `make ui`) serves it; the recipe is
`$CASCADE_RECIPE` or recipes/default.yaml.
"""

from __future__ import annotations

from assets import build_definitions
from dagster_project.recipe import load_recipe

defs = build_definitions(load_recipe())
