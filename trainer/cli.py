"""`cascade train sft|grpo --config PATH [--resume]`: one trainer run outside Dagster (the algorithm names its run config).
`cascade audit CHECKPOINT [--json] [--examples N]`: summary of an RL checkpoint's rollouts.parquet.

CHECKPOINT is a checkpoint folder, its rollouts.parquet, or a stage name (the newest finished
folder under $CASCADE_HOME/checkpoints/<stage>/). A checkpoint without the table is an error
(FileNotFoundError, which `cascade` reports with exit status 2), and so is one whose lineage
record does not verify (spec.lineage_verify: the record or its files were changed after it was
written), named with both values.
"""

from __future__ import annotations

import argparse
import json
import sys

TRAIN_HELP = "run one SFT or GRPO stage from a YAML config"
AUDIT_HELP = "summarize an RL checkpoint's per-rollout rewards (score distribution, reasons, examples)"


def register(subparsers: argparse._SubParsersAction) -> None:
    from trainer.config import RUN_CONFIGS

    parser = subparsers.add_parser("train", help=TRAIN_HELP, description=__doc__.splitlines()[0])
    parser.add_argument("algorithm", choices=sorted(RUN_CONFIGS), help="the trainer algorithm (its run config: SFTConfig / GRPOConfig)")
    parser.add_argument("--config", required=True, help="YAML file with SFTConfig / GRPOConfig fields")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in output_dir")
    parser.set_defaults(func=handler)
    audit = subparsers.add_parser("audit", help=AUDIT_HELP, description="\n".join(__doc__.splitlines()[1:]),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    audit.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint folder, rollouts.parquet, or stage name")
    audit.add_argument("--json", action="store_true", help="print the summary as JSON")
    audit.add_argument("--examples", type=int, default=2, metavar="N", help="examples shown per reason (default 2)")
    audit.set_defaults(func=audit_handler)


def handler(args: argparse.Namespace) -> int:
    from trainer.config import load_config
    from trainer.stage import run_stage

    config = load_config(args.config, args.algorithm)
    if args.resume:
        config = config.model_copy(update={"resume": True})
    result = run_stage(config)
    print(json.dumps({"output_dir": str(result.output_dir), "lineage": str(result.lineage_path),
                      "metrics": str(result.metrics_path)}))
    return 0


def audit_handler(args: argparse.Namespace) -> int:
    from trainer.rollout_audit import (
        format_summary,
        resolve_checkpoint,
        summarize_rollouts,
    )

    from spec.lineage_verify import load_record, verify_record

    checkpoint = resolve_checkpoint(args.checkpoint)
    if load_record(checkpoint)[0] is not None:  # a folder with a record must agree with it
        problems = verify_record(checkpoint)
        if problems:
            raise ValueError("the checkpoint does not verify, its rollouts are not summarized: " + "; ".join(problems))
    summary = summarize_rollouts(checkpoint, examples_per_reason=args.examples)
    if args.json:
        print(json.dumps(summary, indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(format_summary(summary))
    return 0


if __name__ == "__main__":  # `python -m trainer.cli grpo --config ...` (used by the kill test)
    _parser = argparse.ArgumentParser(prog="trainer")
    register(_parser.add_subparsers(dest="command", required=True))
    _args = _parser.parse_args(["train", *sys.argv[1:]])
    sys.exit(_args.func(_args))
