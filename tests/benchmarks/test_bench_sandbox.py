"""The sandbox benchmark runs end to end and prints each program's sandboxed run next to the bare
interpreter's, with the ratio (benchmarks/bench_sandbox.py; the figures themselves are not checked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandboxes.core import sandbox_available
from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")
def test_prints_side_by_side_with_the_ratio(capsys: pytest.CaptureFixture) -> None:
    bench = load_script(ROOT / "benchmarks" / "bench_sandbox.py")
    assert bench.main(["--runs", "2", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.split("  ")[0].strip() in bench.PROGRAMS]
    assert len(rows) == len(bench.PROGRAMS)
    number = r"(\d+\.\d+)"
    for row in rows:
        match = re.search(rf"{number} / +{number} +{number} / +{number} +{number}x / +{number}x", row)
        assert match, row
        bare_best, _, boxed_best, _, ratio, _ = (float(g) for g in match.groups())
        assert ratio == pytest.approx(boxed_best / bare_best, abs=0.02)
    assert "throughput  1 worker(s)" in out
