"""`cascade verify REWARD --input rows.jsonl --output scored.jsonl`.

REWARD is a built-in verifier or the user's own reward by import path (`module:function`) or
file (`path/to/my_rewards.py:function`), scored the way a training stage would score it (the
same registry, adapter and failure reasons). A user reward gets every row column except
`completion` and `prompt`. The summary printed at the end names the reward version used, the
one the cache and lineage key on, so a score can be traced to the code that gave it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rewards.registry import REWARDS, reward_columns

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
Your own reward: `module:function` (importable) or `path/to/file.py:function` (relative to
the working directory), any `fn(prompts, completions, **columns) -> list[float | None]`,
or a Reward class; it gets every row column but `completion` and `prompt`; --option binds
its keyword-only options. A raise, a result of the wrong length or a non-number is a
recorded score 0 with reason `reward_error`, `wrong_length` or `bad_score`.
Output: each input row plus `reward` (number) and `reason` (string). A row missing one of
its reward's columns gets reward 0 and reason `missing_column:<name>`. The summary (stderr,
last line, JSON) gives rows, mean reward, reasons and the reward's `version`.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("verify", help="score completions with a reward (jsonl in, jsonl out)",
                                   description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reward", metavar="REWARD",
                        help=" | ".join(VERIFIERS) + " | module:function | path/to/file.py:function")
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


def load_verifier(reward_name: str, cache: Path | None = None, **options: Any) -> Any:
    """The reward `cascade verify` scores with (a verifier or a user reward), cached if asked."""
    if reward_name not in VERIFIERS and ":" not in reward_name:
        known = "a reward-model reward; verify scores" if reward_name in REWARDS else "unknown reward; use"
        raise ValueError(f"{reward_name!r}: {known} {', '.join(VERIFIERS)}, module:function or path/to/file.py:function")
    from rewards.registry import get_reward

    reward = get_reward(reward_name, **options)
    if cache is not None:
        from rewards.cache import cached

        reward = cached(reward, cache)
    return reward


def verify_rows(reward_name: str, rows: list[dict[str, Any]], batch_size: int = 256, cache: Path | None = None,
                **options: Any) -> list[dict[str, Any]]:
    """Rows with `reward` and `reason` added (the library form of `cascade verify`)."""
    return score_rows(reward_name, load_verifier(reward_name, cache, **options), rows, batch_size)


def score_rows(reward_name: str, reward: Any, rows: list[dict[str, Any]], batch_size: int = 256) -> list[dict[str, Any]]:
    """Rows with `reward` and `reason` added by an already built `reward` named `reward_name`."""
    entry = REWARDS.get(reward_name)
    required = entry.columns if entry else ()
    out = [dict(row) for row in rows]
    columns = reward_columns(reward_name)
    if columns is None:  # a plug-in declares none: every row column but the completion and prompt
        columns = tuple(sorted({k for row in out for k in row} - {"completion", "prompt"}))
    ready = []
    for row in out:
        missing = _missing(row, required)
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
    reward = load_verifier(args.reward, args.cache, **_options(args.option))
    scored = score_rows(args.reward, reward, rows, args.batch_size)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w") as fh:
        for row in scored:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for row in scored:
        counts[row["reason"]] = counts.get(row["reason"], 0) + 1
    print(json.dumps({"reward": args.reward, "version": reward.version, "rows": len(scored),
                      "mean_reward": sum(r["reward"] for r in scored) / max(1, len(scored)),
                      "reasons": counts}), file=sys.stderr)
    return 0
