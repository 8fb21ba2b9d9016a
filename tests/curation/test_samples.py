"""The embedded default data: determinism, coverage of the recipe, realism checks (tests pass,
instructions are satisfied, SWE patches split), planted contamination and a low 9-gram
decontamination rate on the clean generated rows."""

from __future__ import annotations

import json
import re
from functools import lru_cache

import pytest
import yaml

from curation.chat import sft_rows
from curation.patches import parse_patch
from curation.samples import GENERATORS, arithmetic_problems, generate, records
from curation.samples.code import humaneval_problems, run_stdio
from curation.samples.math import gsm8k_cases
from curation.schemas import DOMAIN_SCHEMAS, required_fields
from curation.swe import SweSplitConfig, split_swe
from curation.text import normalize_words
from spec.paths import DEFAULT_RECIPE

SEED = 1234


@lru_cache(maxsize=None)
def rows(name: str) -> tuple:
    return tuple(records(name, SEED))


def good(name: str) -> list[dict]:
    return [r for r in rows(name) if isinstance(r, dict)]


def recipe_generators() -> dict[str, str]:
    data = yaml.safe_load(DEFAULT_RECIPE.read_text())
    return {s["generate"]: s["domain"] for s in data["sources"] + data["benchmarks"] if s.get("generate")}


def test_every_recipe_generator_exists_and_is_deterministic(tmp_path):
    assert set(recipe_generators()) <= set(GENERATORS)
    a = generate("math_sft", tmp_path / "a.jsonl", SEED).read_bytes()
    b = generate("math_sft", tmp_path / "b.jsonl", SEED).read_bytes()
    assert a == b and a != generate("math_sft", tmp_path / "c.jsonl", SEED + 1).read_bytes()


@pytest.mark.parametrize("name", sorted(recipe_generators()))
def test_rows_use_canonical_fields(name):
    domain = recipe_generators()[name]
    fields = {f.name for f in DOMAIN_SCHEMAS[domain]}
    data = good(name)
    assert 30 <= len(data) <= 400
    complete = [r for r in data if all(r.get(f) for f in required_fields(domain))]
    assert len(complete) >= len(data) - 2  # at most the planted missing/empty-field rows
    assert all(set(r) <= fields for r in data)


def test_malformed_lines_are_planted():
    lines = [r for r in rows("math_sft") if isinstance(r, str)]
    assert any(not _parses(line) for line in lines)
    parsed = [json.loads(line) for line in lines if _parses(line)]
    assert any(r.get("answer") == "" for r in parsed) and any("answer" not in r for r in parsed)


def _parses(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def test_code_reference_solutions_pass_their_tests():
    assert all("solution" not in r for r in good("code_eval"))  # held-out: no reference code
    for r in good("code_sft") + good("code_rl"):
        if not r.get("tests"):
            continue
        tests = json.loads(r["tests"])
        if tests["kind"] == "stdio":
            for case in tests["cases"]:
                assert run_stdio(r["solution"], case["input"]) == case["output"]
        else:
            ns: dict = {}
            exec(r["solution"], ns)
            for stmt in tests["asserts"]:
                exec(stmt, ns)
            if "no_think_response" in r:
                assert r["no_think_response"] == f"```python\n{r['solution'].rstrip()}\n```"


def test_instruction_responses_satisfy_their_instructions():
    checks = pytest.importorskip("rewards.ifeval_checks")
    from curation.chat import final_text

    data = good("instruction_sft")
    assert {"punctuation:no_comma", "change_case:english_lowercase", "length_constraints:number_words",
            "detectable_format:number_bullet_lists", "keywords:existence", "startend:end_checker"} <= {
        i for r in data for i in r["instruction_id_list"]}
    for r in data:
        kwargs = json.loads(r["kwargs"])
        assert len(kwargs) == len(r["instruction_id_list"])
        for response in (r["think_response"], r["no_think_response"]):
            for iid, kw in zip(r["instruction_id_list"], kwargs):
                assert checks.INSTRUCTIONS[iid].bind(kw)(final_text(response)), (iid, kw, response)


def test_math_answers_are_right_and_boxed():
    for item in arithmetic_problems(50, seed=3):
        a, b = map(int, re.findall(r"\d+", item["prompt"])[:2])
        assert int(item["answer"]) in (a + b, a - b)
    for r in good("math_sft"):
        if r.get("answer") and r.get("think_response"):
            found = re.match(r"(\d+) ([+-]) (\d+) = (\d+)", r["no_think_response"])
            if found:  # generated rows (planted GSM8K rows are phrased differently)
                a, op, b, c = found.groups()
                assert int(c) == (int(a) + int(b) if op == "+" else int(a) - int(b)) == int(r["answer"])
            assert r["think_response"].endswith(f"\\boxed{{{r['answer']}}}.")
    assert arithmetic_problems(5, seed=1) == arithmetic_problems(5, seed=1) != arithmetic_problems(5, seed=2)


def test_sft_formatting_drops_only_planted_problems():
    for name, domain in [("chat_sft", "chat"), ("science_sft", "science"), ("tool_sft", "tool"),
                         ("instruction_sft", "instruction")]:
        canon = [dict(r, row_id=str(i), source=name) for i, r in enumerate(good(name))]
        table, dropped = sft_rows(canon, domain)
        assert table.num_rows >= 2 * len(canon) - 10, (name, dropped)
        assert set(dropped) <= {"disagrees_with_ground_truth"}, (name, dropped)
    assert sft_rows([dict(r, row_id="x", source="s") for r in good("science_sft")], "science")[1] == {
        "disagrees_with_ground_truth": 8}


def test_swe_pool_patches_and_split():
    pool = good("swe_pool")
    for r in pool:
        assert parse_patch(r["golden_patch"]).files  # real unified diffs with a/ b/ paths
        assert r["golden_patch"].startswith("--- a/") and len(r["candidate_patches"]) == 8
    out = split_swe([dict(r, row_id=str(i), source="swe_pool") for i, r in enumerate(pool)],
                    SweSplitConfig(exclude_repos=["psf/requests"]))
    assert out.sft.num_rows >= 20 and out.rl.num_rows >= 15
    assert out.dropped["duplicate_instance"] == 3 and out.dropped.get("no_signal", 0) >= 1
    assert {"unparsable", "empty"} <= set(out.candidates_dropped)
    evals = {r["golden_patch"] for r in good("swe_eval")}
    assert not evals & {r["golden_patch"] for r in pool}


# ---- decontamination: planted rows are caught, clean rows are not -------------------------------

def _strings(row: dict) -> list[str]:
    out = []
    for v in row.values():
        out.extend([v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else [])
    return out


def _grams(row: dict, n: int = 9) -> set[tuple]:
    grams = set()
    for s in _strings(row):
        w = normalize_words(s)
        grams.update(tuple(w[i:i + n]) for i in range(len(w) - n + 1))
    return grams


def test_nine_gram_decontamination_hits_planted_rows_only():
    bench = set()
    for name in ("math_eval", "instruction_eval", "code_eval", "swe_eval", "chat_eval"):
        for r in good(name):
            bench |= _grams(r)
    bench |= {g for c in gsm8k_cases() for g in _grams({"q": c["prompt"]})}
    bench |= {g for p in humaneval_problems() for g in _grams({"p": p["prompt"]})}
    gsm = {c["prompt"] for c in gsm8k_cases()}
    flagged_planted, total, flagged_clean = 0, 0, []
    for name in ("chat_sft", "math_sft", "code_sft", "science_sft", "instruction_sft", "tool_sft", "swe_pool",
                 "preference", "chat_rl", "instruction_rl", "math_rl", "code_rl"):
        for r in good(name):
            planted = r.get("prompt") in gsm or "Complete the following function." in (r.get("prompt") or "")
            hit = bool(_grams(r) & bench)
            if planted:
                flagged_planted += hit
                assert hit, r["prompt"][:80]
            else:
                total += 1
                if hit:
                    flagged_clean.append((name, r.get("prompt", r.get("issue", ""))[:60]))
    assert flagged_planted == 9
    assert len(flagged_clean) <= 0.01 * total, flagged_clean[:10]
