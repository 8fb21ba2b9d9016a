"""`cascade train sft|grpo --config PATH [--resume]`: one stage outside Dagster."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="run one SFT or GRPO stage from a YAML config",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("sft", "grpo"), help="stage kind")
    parser.add_argument("--config", required=True, help="YAML file with SFTConfig / GRPOConfig fields")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in output_dir")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from trainer.config import load_config
    from trainer.stage import run_stage

    config = load_config(args.config, args.kind)
    if args.resume:
        config = config.model_copy(update={"resume": True})
    result = run_stage(args.kind, config)
    print(json.dumps({"output_dir": str(result.output_dir), "lineage": str(result.lineage_path),
                      "metrics": str(result.metrics_path)}))
    return 0


if __name__ == "__main__":  # `python -m trainer.cli grpo --config ...` (used by the kill test)
    _parser = argparse.ArgumentParser(prog="trainer")
    register(_parser.add_subparsers(dest="command", required=True))
    _args = _parser.parse_args(["train", *sys.argv[1:]])
    sys.exit(_args.func(_args))
