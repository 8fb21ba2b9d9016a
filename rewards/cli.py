"""`cascade verify REWARD --input rows.jsonl --output scored.jsonl`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rewards.registry import REWARDS

# The verifiers (rewards that need no reward-model checkpoint) and the columns each reads.
VERIFIERS = sorted(name for name, entry in REWARDS.items() if not entry.needs_reward_model)

HELP = """\
Score completions with a verifier. Input: JSON lines, one row per completion, with
`completion` (string), optional `prompt`, and the reward's columns:
  math    answer                       reference answer, LaTeX or plain ("3/4", "\\\\frac{3}{4}")
  ifeval  instruction_id_list, kwargs  IFEval ids (["punctuation:no_comma", ...]) and one
                                       kwargs dict per id (a list, or its JSON string)
  code    tests                        a JSON object (or its JSON string), one of:
            {"kind": "stdio", "cases": [{"input": "1 2\\n", "output": "3\\n"}, ...],
             "float_tol": null, "time_limit_s": 2.0}
            {"kind": "assert", "entry_point": "add",
             "asserts": ["assert add(1, 2) == 3", ...], "time_limit_s": 2.0}
          stdio: each case runs the program with `input` on stdin and passes when it exits 0
          and stdout equals `output` (trailing whitespace ignored; numbers within float_tol
          relative when float_tol is set). assert: the asserts run against the solution;
          time_limit_s is per case / per assert. Reward 1 only if every test passes.
  swe     golden_patch (+ code_context)  unified diffs; reward in {-1, 0, 1} or a similarity
Output: each input row plus `reward` (number) and `reason` (string). A row missing one of
its reward's columns gets reward 0 and reason `missing_column:<name>`.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("verify", help="score completions with a reward (jsonl in, jsonl out)",
                                   description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reward", choices=VERIFIERS, metavar="REWARD", help=" | ".join(VERIFIERS))
    parser.add_argument("--input", required=True, type=Path, help="input JSON lines")
    parser.add_argument("--output", required=True, type=Path, help="output JSON lines")
    parser.add_argument("--batch-size", type=int, default=256, help="completions per reward call")
    parser.add_argument("--cache", type=Path, default=None, help="sqlite reward cache file (optional)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="reward constructor option, value parsed as JSON when it can be (repeatable)")
    parser.set_defaults(func=handler)


def _options(pairs: list[str]) -> dict[str, Any]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--option needs KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def _missing(row: dict[str, Any], columns: tuple[str, ...]) -> str | None:
    for name in ("completion", *columns):
        if row.get(name) is None:
            return name
    return None


def verify_rows(reward_name: str, rows: list[dict[str, Any]], batch_size: int = 256, cache: Path | None = None,
                **options: Any) -> list[dict[str, Any]]:
    """Rows with `reward` and `reason` added (the library form of `cascade verify`)."""
    from rewards.registry import get_reward

    reward = get_reward(reward_name, **options)
    if cache is not None:
        from rewards.cache import cached

        reward = cached(reward, cache)
    entry = REWARDS[reward_name]
    columns = entry.columns + entry.optional_columns
    out = [dict(row) for row in rows]
    ready = []
    for row in out:
        missing = _missing(row, entry.columns)
        if missing:
            row["reward"], row["reason"] = 0.0, f"missing_column:{missing}"
        else:
            ready.append(row)
    for start in range(0, len(ready), batch_size):
        batch = ready[start:start + batch_size]
        results = reward.score([r.get("prompt") for r in batch], [r["completion"] for r in batch],
                               **{c: [r.get(c) for r in batch] for c in columns})
        for row, res in zip(batch, results):
            row["reward"], row["reason"] = (0.0 if res.score is None else float(res.score)), res.reason
    return out


def handler(args: argparse.Namespace) -> int:
    rows = []
    with args.input.open() as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as err:
                    raise ValueError(f"{args.input}:{n}: not JSON ({err})") from None
    scored = verify_rows(args.reward, rows, args.batch_size, args.cache, **_options(args.option))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w") as fh:
        for row in scored:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for row in scored:
        counts[row["reason"]] = counts.get(row["reason"], 0) + 1
    print(json.dumps({"rows": len(scored), "mean_reward": sum(r["reward"] for r in scored) / max(1, len(scored)),
                      "reasons": counts}), file=sys.stderr)
    return 0
