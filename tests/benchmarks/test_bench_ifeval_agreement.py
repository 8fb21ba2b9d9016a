"""benchmarks/bench_ifeval_agreement.py: its pair generator, its comparison, and a 50-pair run
against lm-eval's IFEval (downloaded by the script with `pip download`, outside the install)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_ifeval_agreement.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


def test_pairs_are_seeded_valid_and_cover_every_type(bench) -> None:
    from rewards.ifeval import bind_instructions
    from rewards.ifeval_checks import INSTRUCTIONS

    pairs = bench.make_pairs(50, seed=3)
    assert [p.response for p in pairs] == [p.response for p in bench.make_pairs(50, seed=3)]
    assert {p.instruction_id_list[0] for p in pairs} == set(INSTRUCTIONS)
    for p in pairs:
        assert p.response == p.response.strip() and re.search(r"[^\W_]", p.response)
        assert len(set(p.instruction_id_list)) == len(p.instruction_id_list)
        bind_instructions(p.instruction_id_list, p.kwargs)  # our validator accepts every kwarg set
        # lm-eval replaces a falsy kwarg by a random value: the generator never makes one
        assert all(v for kw in p.kwargs for v in kw.values())


def test_compare_counts_and_reports_a_disagreement(bench) -> None:
    pairs = bench.make_pairs(4, seed=0)
    mine = [[True] * len(p.instruction_id_list) for p in pairs]
    ref = [list(v) for v in mine]
    ref[2][0] = False
    report = bench.compare(pairs, mine, ref)
    assert report["pairs"] == 4 and report["pair_agree"] == 3
    assert report["instruction_agree"] == report["instructions"] - 1
    assert [d["key"] for d in report["disagreements"]] == [pairs[2].key]


@pytest.mark.slow  # downloads two wheels (lm-eval, immutabledict) from the package index
def test_fifty_pairs_agree_with_lm_eval_strict_and_loose(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--n", "50", "--seed", "1", "--cache", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for mode in ("strict", "loose"):
        m = re.search(rf"\[{mode}\] instructions: (\d+)/(\d+) agree; pairs \(prompt level\): (\d+)/(\d+) agree",
                      proc.stdout)
        assert m, proc.stdout
        assert m.group(1) == m.group(2) and int(m.group(2)) >= 50
        assert m.group(3) == m.group(4) == "50"
    # lm-eval really ran: the reference modules were extracted and its verdicts vary per type
    assert (tmp_path / "lm-eval-0.4.13" / "lm_eval" / "tasks" / "ifeval" / "instructions.py").is_file()
    assert re.search(r"followed\s+[1-9]\d*\s+not\s+[1-9]", proc.stdout)
