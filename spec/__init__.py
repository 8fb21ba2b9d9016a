"""The ground floor: what every other package agrees on, importing none of them.

Modules:
  paths.py            where the repository and the generated files (`$CASCADE_HOME`) live
  hashing.py          content hashing: configs, files and folders, library code (the one place versions come from)
  consistent_read.py  a file's version from the bytes that were parsed: hash, parse, hash again
  keyed_table.py      an insert-only keyed table on SQLite or PostgreSQL, the store under both caches
  storage.py          the recipe's `storage:` block: where a run's records live
  entry_points.py     `module:attr` and `file.py:attr` strings -> objects, imported only when used
  kinds.py            the stage-kind registry: everything a kind of stage means, declared once
  models.py           the built-in model names (`smollm2`, `tiny`) every caller resolves the same way
  train.py            typed `train:` blocks per stage family and the typed reward spec (`RewardSpec`)
  data.py             the data side of a recipe: sources, benchmarks, curation settings
  generation.py       the `generations:` block: model outputs made inside the platform
  execution.py        the `execution:` block: where a run's steps execute
  recipe.py           the typed recipe (stages, evals) and its loading
  recipe_checks.py    checks across a recipe's blocks, every bad field reported at once
  extends.py          `extends:`: a recipe written as the changes to another recipe
  overrides.py        `--set field.path=value`, applied to the raw recipe before it is validated
  yaml_load.py        bounded YAML: aliases expanded under a size and depth limit
  lineage.py          the lineage record beside every output: its one writer and its reader
  lineage_verify.py   a lineage record checked against the folder it sits in (docs/lineage.md)
  nonfinite.py        the NaN/inf error every trainer raises (stage, step, where to resume)
  docs.py             reference tables generated from the typed models (docs/recipe.md)

Nothing here imports dagster, torch or transformers (an import-linter contract keeps it so):
the CLI, the Dagster code location and every library read it cheaply.
"""
