"""The Dagster side of Cascade: the code location, the `cascade` CLI and the dg component.

The top of the house: it may import every other package; none imports it.

Modules:
  definitions.py       `defs`: the asset graph of the active recipe (`dagster dev -m dagster_project.definitions`)
  component.py         the same graph as a dg Component (`type: dagster_project.component.CascadeRecipe`)
  recipe.py            recipe loading: `spec.recipe` checked against what the libraries register
  cli.py               the `cascade` entry point; each package registers its subcommands
  commands.py          `cascade run | status | lineage` against the local Dagster instance
  selection.py         `cascade run --select`: Dagster's selection syntax (`+asset`), missing upstream named at once
  run_output.py        what a run prints: one line per failure's cause, tracebacks in a log, full or read-only disks
  read_only.py         `lineage | status | report` on a read-only home, from its lineage records
  accounting.py        rows in, kept, quarantined, decontaminated, deduplicated per source and corpus, from the records
  home_lock.py         one run per `$CASCADE_HOME`, and the instance created under a lock
  report_command.py    `cascade report`: the cascade report, printed or written as JSON
  verify_command.py    `cascade verify-home`: every lineage record under the home checked in full
  generate_command.py  `cascade generate`: sample a model on a JSONL of prompts, cached, optionally verified
  pg_storage.py        the instance's PostgreSQL storage (`storage.backend: postgres`) through psycopg2
"""
