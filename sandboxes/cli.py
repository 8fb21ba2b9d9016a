"""`cascade sandbox FILE.py [--stdin PATH] [--timeout S]`: run one file, print one JSON verdict."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sandbox` subcommand to the `cascade` parser."""
    parser = subparsers.add_parser("sandbox", help="run a Python file in the sandbox and print a JSON verdict",
                                   description=__doc__)
    parser.add_argument("file", type=Path, help="Python program to run")
    parser.add_argument("--stdin", type=Path, default=None, help="file whose content is the program's stdin")
    parser.add_argument("--timeout", type=float, default=10.0, help="wall-clock limit in seconds (default 10)")
    parser.add_argument("--memory-mb", type=int, default=None, help="memory limit of the whole run (all its processes) in MiB")
    parser.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    """Exit 0 when the program's status is ok, 1 when it failed, 3 on a sandbox error."""
    from sandboxes.core import run_python
    from sandboxes.limits import SandboxLimits

    if args.timeout <= 0:
        raise ValueError("--timeout must be positive")
    code = args.file.read_text(encoding="utf-8")
    stdin = args.stdin.read_bytes() if args.stdin is not None else None
    extra = {"memory_mb": args.memory_mb} if args.memory_mb else {}
    result = run_python(code, stdin, SandboxLimits(timeout_s=args.timeout, **extra))
    verdict = {"status": result.status, "exit_code": result.exit_code, "stdout": result.stdout,
               "stderr": result.stderr, "wall_ms": result.wall_ms, "detail": result.detail}
    print(json.dumps(verdict))
    if result.status == "sandbox_error":
        return 3
    return 0 if result.ok else 1
