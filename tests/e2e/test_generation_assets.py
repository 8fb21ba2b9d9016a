"""Generation as assets, end to end through Dagster on the tiny model: a rejection-sampling
generation whose teacher is an earlier SFT checkpoint feeds the next SFT stage, and a pass-rate
generation from the RL stage's input checkpoint feeds its prompt set. Reruns come from the
generation cache; a retrained teacher makes exactly its generations and their downstream stale;
the lineage names teacher, engine settings and verifier version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagster_project.cli import main

pytestmark = pytest.mark.slow

GRPO = "{max_steps: 1, prompts_per_step: 2, num_generations: 2, max_new_tokens: 8, learning_rate: 2.0e-6}"
SFT = "{epochs: 1, batch_size: 4, learning_rate: 5.0e-5, max_length: 256, max_steps: 1}"
RECIPE = f"""\
name: generation_assets
seed: 11
model: {{base: tiny}}
sources:
  - {{name: math_sft, domain: math, path: "${{CASCADE_HOME}}/samples/math_sft.jsonl", generate: math_sft, limit: 8}}
  - {{name: math_prompts, domain: math, path: "${{CASCADE_HOME}}/samples/math_prompts.jsonl", generate: math_rl, limit: 12}}
generations:
  - name: math_teacher
    input: math_sft
    use: rejection
    model: sft
    verify: math
    threshold: 0.0        # the tiny model is random: keep whatever is well-formed
    samples: 2
    limit: 4
    sampling: {{max_new_tokens: 12, temperature: 1.0, seed: 3}}
  - name: math_pass
    input: math_prompts
    use: pass_rate
    verify: math
    samples: 2
    modes: [no_think]
    drop_unsolved: false  # a random policy solves nothing; keep the prompts anyway
    limit: 6
    sampling: {{max_new_tokens: 8}}
sft_stages:
  - {{name: sft, sources: [math_sft], max_tokens: 256, train: {SFT}}}
  - {{name: sft2, sources: [math_sft, math_teacher], max_tokens: 256, train: {SFT}}}
rl_stages:
  - {{name: math_rl, kind: math, sources: [math_pass], rewards: [math], train: {GRPO}}}
evals: {{max_new_tokens: 8, modes: [no_think], blocking: false,
        training_signal_blocking: false}}  # a tiny random policy learns nothing in 2 steps
"""
TEACHER_DOWNSTREAM = {"sft", "math_teacher", "sft2_data", "sft2", "math_pass", "math_rl_prompts", "math_rl"}


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE)
    assert main(["run", "--recipe", str(path)]) == 0
    return path


def _metadata(recipe: Path, name: str) -> dict:
    from assets.common import latest_metadata
    from dagster_project.commands import _context, get_instance, resolve_key

    _, defs, _ = _context(str(recipe))
    return latest_metadata(get_instance(), resolve_key(defs, name))


def _status(recipe: Path, capsys, *extra: str) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["status", "--json", "--recipe", str(recipe), *extra]) == 0
    return {r["asset"]: r for r in json.loads(capsys.readouterr().out)}


def test_generations_materialize_cache_and_go_stale_with_their_teacher(recipe: Path, capsys) -> None:
    teacher = _metadata(recipe, "math_teacher")
    assert teacher["generated"] == 4 * 2 * 2 and teacher["cached"] == 0  # prompts x modes x samples
    assert teacher["rows_in"] == teacher["rows_out"] + teacher["rows_dropped"]
    passed = _metadata(recipe, "math_pass")
    assert passed["rows_in"] == 6 and passed["rows_out"] == 6  # every rate kept: none solved, none dropped
    record = json.loads((Path(teacher["path"]) / "lineage.json").read_text())
    assets = {i["asset"] for i in record["inputs"]}
    assert {"clean_math_sft", "sft", "reward/math"} <= assets
    assert record["config"]["generation"]["sampling"]["max_new_tokens"] == 12

    # A rerun of the same generation takes everything from the cache: same version, nothing generated.
    assert main(["run", "--select", "math_teacher,math_pass", "--recipe", str(recipe)]) == 0
    again = _metadata(recipe, "math_teacher")
    assert again["generated"] == 0 and again["cached"] == 16 and again["data_version"] == teacher["data_version"]
    assert _metadata(recipe, "math_pass")["generated"] == 0

    # A different teacher (the SFT stage retrained) stales exactly its generations and their downstream.
    status = _status(recipe, capsys, "--set", "sft_stages.sft.train.learning_rate=4e-5")
    stale = {a for a, r in status.items() if r["stale"] or not r["materialized"]}
    assert stale == TEACHER_DOWNSTREAM, stale ^ TEACHER_DOWNSTREAM
