"""The recovery benchmark's pure helpers (benchmarks/recovery_lib.py): rows, references, statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.script_module import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lib():
    return load_script(ROOT / "benchmarks" / "recovery_lib.py")


@pytest.mark.parametrize("domain", ["mcqa", "structured_output", "tool_call", "math", "ifeval"])
def test_domain_rows_are_disjoint_and_labelled(lib, domain):
    train, held = lib.domain_rows(domain, 20, 16)
    assert len(train) == 20 and len(held) == 16
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    ids = [r["row_id"] for r in train + held]
    assert len(set(ids)) == len(ids)
    assert {r["domain"] for r in train + held} == {domain}
    assert {r["mode"] for r in train + held} == {"no_think"}


@pytest.mark.parametrize("domain", ["mcqa", "structured_output", "tool_call", "math"])
def test_reference_responses_pass_their_verifier(lib, domain):
    train, _ = lib.domain_rows(domain, 12, 1)
    assert lib.score_texts(train, [lib.reference_response(r) for r in train]) == [1.0] * len(train)
    # and a wrong answer does not: the verifier is really applied per row
    assert lib.score_texts(train[:1], ["no idea"]) == [0.0]


def test_score_texts_routes_each_row_to_its_domain_reward(lib):
    a, _ = lib.domain_rows("mcqa", 3, 1)
    b, _ = lib.domain_rows("math", 3, 1)
    rows = [a[0], b[0], a[1], b[1]]
    texts = [lib.reference_response(a[0]), lib.reference_response(b[0]), "Z", "-1"]
    assert lib.score_texts(rows, texts) == [1.0, 1.0, 0.0, 0.0]


def test_write_prompts_keeps_rl_schema_columns(lib, tmp_path):
    train, _ = lib.domain_rows("tool_call", 5, 1)
    path = lib.write_prompts(train, tmp_path / "p.parquet")
    back = pq.read_table(path).to_pylist()
    assert [r["row_id"] for r in back] == [r["row_id"] for r in train]
    assert json.loads(back[0]["reference_call"]) == json.loads(train[0]["reference_call"])
    assert back[0]["answer"] is None


def test_cell_uses_wilson_for_pass_rates_and_bootstrap_otherwise(lib):
    c = lib.cell_of({"x": 1.0, "y": 0.0, "z": 1.0, "w": 1.0})
    assert c["method"] == "wilson" and c["pass"] == 3 and c["n"] == 4 and c["rate"] == 0.75
    assert c["ci95"][0] < 0.75 < c["ci95"][1]
    assert lib.cell_of({"x": 0.5, "y": 0.25})["method"] == "bootstrap"


def test_paired_aligns_rows_by_id_not_by_order(lib):
    old = {f"r{i}": 1.0 for i in range(10)}
    new = {f"r{i}": (0.0 if i < 8 else 1.0) for i in reversed(range(10))}  # 8 rows lost, inserted backwards
    t = lib.paired(old, new)
    assert t["test"] == "mcnemar_midp" and t["n"] == 10
    assert t["diff"] == pytest.approx(-0.8)
    assert t["p_value"] < 0.01
    same = lib.paired(old, dict(reversed(list(old.items()))))
    assert same["diff"] == 0 and same["p_value"] == 1.0
    # rows only one side scored are left out
    assert lib.paired(old, {"r0": 0.0, "other": 1.0})["n"] == 1
