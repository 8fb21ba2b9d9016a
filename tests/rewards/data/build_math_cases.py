"""Rebuild math_cases.jsonl from math-verify's own test-suite (not run by pytest).

    pip download math-verify==0.9.0 --no-binary :all: --no-deps -d /tmp/mv && tar xzf ...
    python tests/rewards/data/build_math_cases.py /tmp/mv/math_verify-0.9.0/tests

Each (gold, pred, expected) tuple of math-verify's parametrized tests becomes one row:
`answer` = gold; `completion` = pred itself when it already has a \\boxed answer, else the
pred's math wrapped as "The final answer is \\boxed{...}" (our reward only reads boxes),
and free-text preds without a box stay as they are (our verdict: no_boxed_answer).
`expected` is math-verify's stated verdict for (gold, pred); `mv_verdict` is math-verify's
own verdict, `verify(parse(gold), parse(completion))`, on the row as stored. Cases run with
non-default options (precision, strict=False, set-relation comparison) are left out.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

from math_verify import parse, verify

_DELIMS = [("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")]


def _pure_math(pred: str) -> str | None:
    text = pred.strip()
    for left, right in _DELIMS:
        if text.startswith(left) and text.endswith(right) and len(text) > len(left) + len(right):
            inner = text[len(left) : -len(right)].strip()
            return None if "$" in inner else inner
    return text if len(text) < 40 and not re.search(r"(?<![\\A-Za-z])[A-Za-z]{3,}", text) else None


def cases(test_dir: Path):
    for path in sorted(test_dir.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and getattr(deco.func, "attr", "") == "parametrize"):
                    continue
                names = [n.strip() for n in ast.literal_eval(deco.args[0]).split(",")]
                if not {"gold", "pred", "expected"} <= set(names):
                    continue
                for element in deco.args[1].elts:
                    try:
                        row = dict(zip(names, ast.literal_eval(element)))
                    except ValueError:
                        continue
                    if row.get("precision", 6) != 6 or row.get("strict", True) is not True or row.get("allow_set_relation_comp"):
                        continue
                    yield f"math-verify/tests/{path.name}::{node.name}", row


def main(test_dir: str, out: str) -> None:
    rows, seen = [], set()
    for source, case in cases(Path(test_dir)):
        gold, pred, expected = str(case["gold"]), str(case["pred"]), int(case["expected"])
        if "\\boxed" in pred or "\\fbox" in pred:
            completion, form = pred, "as_is"
        elif (math := _pure_math(pred)) is not None:
            completion, form = f"The final answer is \\boxed{{{math}}}.", "boxed_wrap"
        else:
            completion, form = pred, "no_box"
        if (gold, completion) in seen:
            continue
        seen.add((gold, completion))
        mv = int(verify(parse(gold), parse(completion)))
        rows.append({"source": source, "answer": gold, "pred": pred, "completion": completion,
                     "form": form, "expected": expected, "mv_verdict": mv})
    # Cross pairs (each completion against the next case's gold): mostly negatives, which
    # math-verify's suites have few of. No stated verdict; math-verify's own is the oracle.
    for row, other in zip(rows[:], rows[1:] + rows[:1]):
        if other["answer"] != row["answer"] and row["form"] != "no_box":
            mv = int(verify(parse(other["answer"]), parse(row["completion"])))
            rows.append({**row, "source": row["source"] + "+cross", "answer": other["answer"], "expected": None, "mv_verdict": mv})
    with open(out, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(len(rows), "cases ->", out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).with_name("math_cases.jsonl")))
