"""Loading a recipe for the Dagster code location and the CLI: the typed model of
`spec.recipe`, checked against what the libraries register: the rewards library's catalog
(reward names and options), curation's row layouts (`sources[].format`), source readers
(`sources[].reader`) and the trainer's registered backends (`train.backend`).

The model itself, its blocks and their docs live in `spec/`; this module only joins the two
checks, so every caller (definitions, `cascade run/status/lineage`, the dg component) loads a
recipe the same way and a bad one fails before any asset runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from curation.formats import FORMATS
from curation.sources import READERS
from rewards.registry import CATALOG
from spec import recipe as _spec
from spec.recipe import Recipe
from trainer.stage import backend_algorithms

__all__ = ["load_recipe", "parse_recipe"]


def parse_recipe(data: Any, path: Path | None = None, overrides: Sequence[str] = ()) -> Recipe:
    """Validate a recipe mapping, rewards included; raises RecipeError naming each bad field."""
    return _spec.parse_recipe(data, path, rewards=CATALOG, formats=FORMATS, readers=READERS, overrides=overrides,
                              backends=backend_algorithms())


def load_recipe(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Recipe:
    """Load and validate a recipe file (default: `$CASCADE_RECIPE` or recipes/default.yaml);
    `overrides` are `cascade run --set` strings, applied before validation."""
    return _spec.load_recipe(path, rewards=CATALOG, formats=FORMATS, readers=READERS, overrides=overrides,
                              backends=backend_algorithms())
