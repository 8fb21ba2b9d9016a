"""Editing a user reward's source makes exactly the assets that depend on it stale, like a
swapped dataset: the RL stage that scores with it, the checkpoints downstream of it and their
evals. Nothing upstream (data, SFT, earlier evals) moves.

The recipe is a cut-down tiny recipe: one SFT stage, two RL stages (the first scores with a
reward function from a module written into tmp_path and imported by `module:function`, the
second with the built-in math verifier), one held-out eval set.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from dagster_project.cli import main
from rewards.registry import get_reward
from spec.hashing import source_version

pytestmark = pytest.mark.slow

REWARD_SOURCE = '''
def brevity(prompts, completions, *, limit: int = 40, **columns):
    """1 for a completion of at most `limit` characters."""
    return [1.0 if len(c) <= limit else 0.0 for c in completions]
'''
GRPO = "{max_steps: 1, prompts_per_step: 2, num_generations: 2, max_new_tokens: 8, learning_rate: 2.0e-6}"
RECIPE = """\
name: reward_staleness
seed: 7
model: {{base: tiny}}
sources:
  - {{name: math_sft, domain: math, path: "${{CASCADE_HOME}}/samples/math_sft.jsonl", generate: math_sft, limit: 8}}
  - {{name: math_prompts, domain: math, path: "${{CASCADE_HOME}}/samples/math_prompts.jsonl", generate: math_rl, limit: 12}}
benchmarks:
  - {{name: eval_math, path: "${{CASCADE_HOME}}/samples/eval_math.jsonl", generate: math_eval, domain: math,
     eval_domain: math, eval_limit: 2}}
sft_stages:
  - name: sft
    sources: [math_sft]
    max_tokens: 256
    train: {{epochs: 1, batch_size: 4, learning_rate: 5.0e-5, max_length: 256, max_steps: 1}}
rl_stages:
  - name: custom_rl
    kind: math
    sources: [math_prompts]
    max_prompts: 4  # RL prompt sets are disjoint: leave the rest to math_rl
    rewards: [{{name: "{reward}", options: {{limit: 30}}}}]
    train: {grpo}
  - name: math_rl
    kind: math
    sources: [math_prompts]
    rewards: [{{name: math}}]
    train: {grpo}
evals:
  max_new_tokens: 8
  modes: [no_think]
  blocking: false
  training_signal_blocking: false  # tiny random policies learn nothing in 2 steps
"""
DEPENDENT = {"custom_rl", "math_rl", "eval_custom_rl", "eval_math_rl", "forgetting_matrix"}


@pytest.fixture
def cascade(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(recipe path, reward module path), materialized end to end in a private CASCADE_HOME."""
    module = f"staleness_rewards_{uuid.uuid4().hex[:8]}"
    code = tmp_path / "code"
    code.mkdir()
    (code / f"{module}.py").write_text(REWARD_SOURCE)
    monkeypatch.syspath_prepend(str(code))  # the stages run in this process; PYTHONPATH for any child
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(reward=f"{module}:brevity", grpo=GRPO))
    assert main(["run", "--recipe", str(recipe)]) == 0
    return recipe, code / f"{module}.py"


def _status(recipe: Path, capsys: pytest.CaptureFixture) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["status", "--json", "--recipe", str(recipe)]) == 0
    return {row["asset"]: row for row in json.loads(capsys.readouterr().out)}


def test_editing_a_reward_stales_exactly_its_dependents(cascade, capsys) -> None:
    recipe, reward_file = cascade
    status = _status(recipe, capsys)
    assert all(r["materialized"] for r in status.values()), [a for a, r in status.items() if not r["materialized"]]
    assert not [a for a, r in status.items() if r["stale"]]
    assert DEPENDENT <= set(status)

    stat = reward_file.stat()
    reward_file.write_text(REWARD_SOURCE.replace("at most", "no more than"))  # a behaviour-neutral edit
    os.utime(reward_file, ns=(stat.st_mtime_ns + 10**9, stat.st_mtime_ns + 10**9))

    status = _status(recipe, capsys)
    stale = {a for a, r in status.items() if r["stale"]}
    assert stale == DEPENDENT, stale
    assert any("custom_rl" in c and "code version" in c for c in status["custom_rl"]["stale_causes"]), \
        status["custom_rl"]["stale_causes"]
    for upstream in ("base_model", "sft", "eval_sft", "eval_base_model", "custom_rl_prompts", "math_rl_prompts"):
        assert not status[upstream]["stale"], upstream

    # Rerunning the stale set records the new reward version in the new checkpoint's lineage.
    before = status["custom_rl"]["data_version"]
    assert main(["run", "--stale", "--recipe", str(recipe)]) == 0
    status = _status(recipe, capsys)
    assert not [a for a, r in status.items() if r["stale"]] and status["custom_rl"]["data_version"] != before
    capsys.readouterr()
    assert main(["lineage", "custom_rl", "--json", "--recipe", str(recipe)]) == 0
    tree = json.loads(capsys.readouterr().out)
    name = f"{reward_file.stem}:brevity"
    [node] = [i for i in tree["inputs"] if i["asset"] == f"reward/{name}"]
    assert node["data_version"] == get_reward(name, limit=30).version
    assert node["data_version"].startswith(source_version(name))

    # The checkpoints of `make run`-style runs are auditable: every rollout, its reward and reason.
    capsys.readouterr()
    assert main(["audit", "custom_rl", "--json"]) == 0
    audit = json.loads(capsys.readouterr().out)
    assert audit["rollouts"] == 1 * 2 * 2  # steps x prompts x generations
    assert set(audit["rewards"]) == {name}

    # `--set` changes one stage without editing the file; its lineage records the override.
    override = ["--set", "rl_stages.custom_rl.train.learning_rate=3e-6"]
    assert main(["run", "--select", "custom_rl", "--recipe", str(recipe), *override]) == 0
    capsys.readouterr()
    assert main(["lineage", "custom_rl", "--json", "--recipe", str(recipe), *override]) == 0
    record = json.loads((Path(json.loads(capsys.readouterr().out)["path"]) / "lineage.json").read_text())
    assert record["overrides"] == {"rl_stages.custom_rl.train.learning_rate": 3e-6}
    assert record["config"]["learning_rate"] == 3e-6
    capsys.readouterr()
    assert main(["status", "--json", "--recipe", str(recipe), *override]) == 0
    rows = {r["asset"]: r for r in json.loads(capsys.readouterr().out)}
    assert not rows["custom_rl"]["stale"] and rows["math_rl"]["stale"]  # downstream of the changed stage
