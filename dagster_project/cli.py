"""`cascade` command line: one entry point, subcommands registered by each package.

Each package contributes a `register(subparsers)` function in its own `cli.py`; handlers
import heavy libraries (torch, transformers, dagster) only when they run, so `cascade --help`
starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute subcommands, in help order.
_COMMAND_MODULES = (
    "dagster_project.commands",  # run, status, lineage
    "dagster_project.report_command",  # report
    "dagster_project.verify_command",  # verify-home
    "curation.cli",  # decontam
    "rewards.cli",  # verify
    "sandboxes.cli",  # sandbox
    "trainer.cli",  # train, audit
    "dagster_project.generate_command",  # generate
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cascade", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI reports, it does not dump tracebacks
        from dagster_project.home_lock import BUSY_EXIT_CODE, HomeBusy
        from spec.recipe import RecipeError

        if isinstance(err, HomeBusy):  # another run holds this home: say who, exit 3 (README.md#one-run-per-home)
            print(f"cascade {args.command}: {err}", file=sys.stderr)
            return BUSY_EXIT_CODE
        if isinstance(err, (RecipeError, FileNotFoundError, ValueError)):
            print(f"cascade {args.command}: error: {err}", file=sys.stderr)
            return 2
        return _environment_fault(args, err)


def _environment_fault(args: argparse.Namespace, err: Exception) -> int:
    """A full or read-only home (however deep it surfaced: OSError, SQLite through SQLAlchemy):
    one line naming the home and what to do, the traceback in a log, exit 1. Anything else is raised."""
    from dagster_project.run_output import report_exception
    from spec.paths import cascade_home

    message = report_exception(args.command, err, cascade_home(), getattr(args, "debug", False))
    if message is None:
        raise err
    print(message, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
