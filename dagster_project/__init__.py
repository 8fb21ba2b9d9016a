"""The Dagster side of Cascade: the code location, the `cascade` CLI and the dg component.

  definitions.py  `defs`: the asset graph of the active recipe (`dagster dev -m dagster_project.definitions`)
  component.py    the same graph as a dg Component (`type: dagster_project.component.CascadeRecipe`)
  recipe.py       recipe loading: the typed model of `spec.recipe` checked against the reward catalog
  cli.py          `cascade` entry point; each package registers its subcommands
  commands.py     `cascade run | status | lineage` against the local Dagster instance

The top of the house: it may import every other package; none imports it.
"""
