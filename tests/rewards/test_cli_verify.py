"""`cascade verify`: jsonl contract for math, ifeval, code, swe, via the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GOLD = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
CASES = {
    "math": [
        ({"prompt": "1+1?", "completion": "<think>1+1</think>\\boxed{2}", "answer": "2"}, 1.0, "correct"),
        ({"completion": "\\boxed{3}", "answer": "2"}, 0.0, "wrong_answer"),
        ({"completion": "\\boxed{3}"}, 0.0, "missing_column:answer"),
    ],
    "ifeval": [
        ({"completion": "hello world", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}, 1.0, None),
        ({"completion": "hello, world", "instruction_id_list": ["punctuation:no_comma"], "kwargs": "[{}]"}, 0.0, None),
        ({"completion": "hi", "instruction_id_list": ["punctuation:no_comma"]}, 0.0, "missing_column:kwargs"),
    ],
    "code": [
        ({"completion": "```python\nprint(sum(map(int, input().split())))\n```",
          "tests": {"kind": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}]}}, 1.0, "correct"),
        ({"completion": "```python\ndef add(a, b):\n    return a - b\n```",
          "tests": json.dumps({"kind": "assert", "entry_point": "add", "asserts": ["assert add(1, 2) == 3"]})}, 0.0, None),
        ({"completion": "print(1)"}, 0.0, "missing_column:tests"),
    ],
    "swe": [
        ({"completion": f"```diff\n{GOLD}```", "golden_patch": GOLD}, 1.0, "exact_match"),
        ({"completion": "no idea", "golden_patch": GOLD}, -1.0, "unparsable"),
        ({"completion": GOLD}, 0.0, "missing_column:golden_patch"),
    ],
}


@pytest.mark.parametrize("reward", sorted(CASES))
def test_verify_contract(reward, tmp_path):
    rows = [dict(row, row_id=i) for i, (row, _, _) in enumerate(CASES[reward])]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out" / "scored.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = ["--option", "similarity=lexical"] if reward == "swe" else []
    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli", "verify", reward, "--input", str(src),
                           "--output", str(dst), *options], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    assert len(out) == len(rows)
    for row, got, (_, reward_value, reason) in zip(rows, out, CASES[reward]):
        assert {k: got[k] for k in row} == row  # input row preserved
        assert isinstance(got["reward"], float) and isinstance(got["reason"], str)
        assert got["reward"] == reward_value, got
        if reason:
            assert got["reason"] == reason
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    assert summary["rows"] == len(rows)
    # the version it used is printed: the reward's source digest (+ what its options change)
    from rewards.registry import reward_code_versions

    assert summary["reward"] == reward and summary["version"].startswith(reward_code_versions([reward])[reward])


def test_help_documents_tests_format_and_bad_input(tmp_path):
    from dagster_project.cli import main

    proc = subprocess.run([sys.executable, "-m", "dagster_project.cli", "verify", "--help"], capture_output=True, text=True)
    assert '"kind": "stdio"' in proc.stdout and '"kind": "assert"' in proc.stdout and "missing_column" in proc.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["verify", "math", "--input", str(bad), "--output", str(tmp_path / "o.jsonl")]) == 2


def test_cache_option_reuses_scores(tmp_path):
    from rewards.cli import verify_rows

    rows = [{"completion": "\\boxed{2}", "answer": "2"}]
    first = verify_rows("math", rows, cache=tmp_path / "c.sqlite")
    assert first == verify_rows("math", rows, cache=tmp_path / "c.sqlite") and first[0]["reward"] == 1.0
    assert Path(tmp_path / "c.sqlite").stat().st_size > 0
