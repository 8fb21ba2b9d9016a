"""`cascade report`: the cascade report of the latest run, printed or written as JSON.

The same report the `evals/forgetting_matrix` asset stores (assets.evals.cascade_report):
checkpoint × domain scores with 95% intervals per mode, each stage's own-domain gain with its
p-value, every gate's verdict and margin, and training-curve summaries. It reads the latest
eval reports and stage metrics from the Dagster instance (on a read-only home, from the lineage
records: dagster_project.read_only), so it also works on a partial run:
whatever was not evaluated is shown as missing, never as 0. An eval or checkpoint folder whose
lineage record does not verify (spec.lineage_verify) is shown as missing too, with the cause on
stderr: its numbers are not reported as if they were sound.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from dagster_project.commands import _add_set

    report = sub.add_parser("report", help="forgetting matrix with intervals, per-stage gains, gate verdicts")
    report.add_argument("--recipe", help="recipe YAML (default: $CASCADE_RECIPE or recipes/default.yaml)")
    report.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    _add_set(report)
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    import dagster as dg

    from assets.common import latest_metadata, materialization_problems
    from assets.evals import cascade_report
    from dagster_project.commands import get_instance
    from dagster_project.read_only import open_for_reading
    from dagster_project.recipe import load_recipe
    from trainer.cascade_report import render_text

    recipe = load_recipe(args.recipe, overrides=args.set or ())
    instance = open_for_reading("report", get_instance)[0]  # a read-only home: its lineage records (dagster_project.read_only)

    def path_of(asset_key: dg.AssetKey) -> Path | None:
        try:
            path = Path(latest_metadata(instance, asset_key)["path"])
        except (dg.Failure, KeyError):
            return None
        problems = materialization_problems(instance, asset_key)
        for problem in problems:
            print(f"cascade report: {asset_key.to_user_string()} left out: {problem}", file=sys.stderr)
        return None if problems else path

    report = cascade_report(recipe, path_of)
    print(render_text(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"\nwrote {args.json}")
    return 0
