"""`cascade decontam` end to end, as a subprocess of the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from curation.decontam import reference_decontaminate

_CASCADE = Path(sys.executable).parent / "cascade"
_Q = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(_CASCADE), "decontam", *args], capture_output=True, text=True, timeout=120)


def test_decontam_cli_contract(tmp_path):
    (tmp_path / "gsm.jsonl").write_text(json.dumps({"question": _Q, "answer": "72"}) + "\n")
    pq.write_table(pa.table({"prompt": ["def add(a, b):\n    return a + b  # adds two numbers together always"]}), tmp_path / "code.parquet")
    rows = [
        {"id": 0, "text": "clean row", "other": "also clean"},
        {"id": 1, "text": "x " + _Q.upper(), "other": None},
        {"id": 2, "text": "nine words are not here", "other": "b):\n return a + b # adds two numbers together always!"},
        {"id": 3, "text": "Natalia sold clips to 48 of her friends", "other": "eight words only"},
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out, report = tmp_path / "out" / "kept.parquet", tmp_path / "report.json"
    proc = _run("--benchmark", f"gsm8k={tmp_path / 'gsm.jsonl'}", "--benchmark", f"he={tmp_path / 'code.parquet'}",
                "--input", str(tmp_path / "in.jsonl"), "--output", str(out), "--report", str(report))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(report.read_text())
    assert got == {
        "rows_in": 4, "rows_kept": 2, "rows_dropped": 2, "by_benchmark": {"gsm8k": 1, "he": 1},
        "dropped": [
            {"row": 1, "benchmark": "gsm8k", "ngram": "natalia sold clips to 48 of her friends in"},
            {"row": 2, "benchmark": "he", "ngram": "b return a b adds two numbers together always"},
        ],
    }
    assert pq.read_table(out).column("id").to_pylist() == [0, 3]
    bench = {"gsm8k": [{"question": _Q, "answer": "72"}], "he": pq.read_table(tmp_path / "code.parquet").to_pylist()}
    assert [c.row for c in reference_decontaminate(rows, bench, n=7)] == [1, 2, 3]

    # --ngram and --fields change what is checked.
    proc = _run("--benchmark", f"gsm8k={tmp_path / 'gsm.jsonl'}", "--input", str(tmp_path / "in.jsonl"),
                "--output", str(out), "--report", str(report), "--ngram", "7", "--fields", "text")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(report.read_text())
    assert [d["row"] for d in got["dropped"]] == [1, 3] and got["by_benchmark"] == {"gsm8k": 2}


def test_decontam_cli_errors_are_reported(tmp_path):
    proc = _run("--benchmark", "nopath", "--input", str(tmp_path / "x.jsonl"), "--output", str(tmp_path / "o.parquet"))
    assert proc.returncode == 2 and "NAME=PATH" in proc.stderr


def test_decontam_cli_workers_do_not_change_the_output(tmp_path):
    bench = tmp_path / "bench.parquet"
    pq.write_table(pa.table({"q": [_Q, "Σοφός café naïve Straße 中文字符 déjà vu ΣΟΦΟΣ the end"]}), bench)
    rows = [{"t": f"{i} {_Q if i % 3 == 0 else 'clean'} “{_Q.upper() if i % 5 == 0 else ''}” ΣΟΦΟΣ"} for i in range(300)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    reports = []
    for workers in ("1", "2"):
        report = tmp_path / f"report{workers}.json"
        proc = _run("--benchmark", f"b={bench}", "--input", str(tmp_path / "in.parquet"),
                    "--output", str(tmp_path / f"out{workers}.parquet"), "--report", str(report), "--workers", workers)
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(report.read_text()))
    assert reports[0] == reports[1] and reports[0]["rows_dropped"] == 140
    assert [d["row"] for d in reports[0]["dropped"]] == [c.row for c in reference_decontaminate(rows, {"b": pq.read_table(bench).to_pylist()})]
    proc = _run("--benchmark", f"b={bench}", "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "o.parquet"),
                "--workers", "0")
    assert proc.returncode == 2 and "--workers" in proc.stderr
