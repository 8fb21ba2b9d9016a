"""The ground floor: what every other package agrees on, importing none of them.

  paths.py    where the repository and the generated files (`$CASCADE_HOME`) live
  hashing.py  content hashing: configs, files and folders, library code (one function each)
  kinds.py    the stage-kind registry (sources, prompt columns, default rewards, eval, trainer)
  entry_points.py  `module:attr` strings -> objects (how registries name code lazily)
  train.py    typed `train:` blocks per stage family and the typed reward spec
  data.py     the data side of a recipe: sources, benchmarks, curation settings
  recipe.py   the typed recipe model (stages, evals), its validation and loading
  lineage.py  the lineage record written beside every dataset, checkpoint and eval; its reader
  docs.py     reference tables generated from the typed models (docs/recipe.md)

Nothing here imports dagster, torch or transformers (an import-linter contract keeps it so):
the CLI, the Dagster code location and every library read it cheaply.
"""
