"""benchmarks/bench_dedup_scale.py at a tiny size (2000 rows / 2 shards vs 8000 rows / 8 shards):
every step runs as its own process and is measured, the sharded output equals the in-process
dedup, planted duplicates are found, and the throughput figure (with datatrove when installed)
runs on the same rows. Sizes, not wall times, are what the assertions bound."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_dedup_scale.py"
KINDS = ("shard", "dedup partition", "cluster", "assemble")


@pytest.mark.slow  # ~30 step processes: about a minute on 2 cores
def test_tiny_run_prints_every_figure(tmp_path: Path) -> None:
    datatrove = importlib.util.find_spec("datatrove") is not None
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "CASCADE_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp)}
    cmd = [sys.executable, str(SCRIPT), "--rows", "2000", "--shards", "2", "--rounds", "1"]
    proc = subprocess.run(cmd + ([] if datatrove else ["--no-datatrove"]), cwd=ROOT, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    result = json.loads(next(line for line in lines if line.startswith("json: "))[len("json: "):])
    assert result["settings"] == {"rows": 2000, "shards": 2, "scale": 4, "rounds": 1}

    scale = result["scale"]
    for label, rows, shards in (("1x", 2000, 2), ("4x", 8000, 8)):
        size = scale[label]
        assert (size["rows"], size["shards"]) == (rows, shards)
        assert [size["kinds"][k]["steps"] for k in KINDS] == [shards, shards, 1, 1]
        assert all(size["kinds"][k]["rss_mb"] > 20 for k in KINDS)  # a real process's peak, in MB
        assert size["largest_rss_mb"] == max(size["kinds"][k]["rss_mb"] for k in KINDS)
        rec = size["recall"]
        assert rec["planted_near"] > 0 and rec["planted_exact"] > 0
        assert rec["near"] >= 0.95 and rec["exact"] >= 0.95
        assert rec["false_removals"] == 0 and rec["originals_removed"] == 0
        assert 0 < size["rows_out"] < rows
    assert scale["rss_ratio"] == pytest.approx(scale["4x"]["largest_rss_mb"] / scale["1x"]["largest_rss_mb"])
    assert scale["inprocess"] == {**scale["inprocess"], "same_version": True, "same_removed": True, "same_rows": True}
    assert any(line.startswith("largest step 4x / 1x:") for line in lines)

    tp = result["throughput"]
    assert tp["rows"] == 2000
    assert tp["ours"]["rows_per_s"] > 0 and tp["ours"]["recall"]["near"] >= 0.95 and tp["ours"]["recall"]["exact"] >= 0.95
    if datatrove:
        assert tp["datatrove"]["rows_per_s"] > 0
        assert tp["ratio"] == pytest.approx(tp["ours"]["rows_per_s"] / tp["datatrove"]["rows_per_s"])
        assert tp["datatrove"]["recall"]["near"] > 0.5  # its LSH without confirmation: context, not a target
    else:
        assert "datatrove" not in tp
    assert list(tmp.iterdir()) == []  # the script removed its temporary folders
