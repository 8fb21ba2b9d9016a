"""The Cascade 2 recipes: recipes/cascade2.yaml (and cascade2_proof.yaml, which extends it) validate
under their own stage order, and a tiny
version of it (same graph, tiny random model, a few rows per source) materializes end to end
through Dagster; MOPD's lineage names its teachers, and retraining a teacher makes MOPD stale."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from dagster_project.cli import main
from dagster_project.recipe import load_recipe, parse_recipe
from spec.paths import REPO_ROOT
from spec.recipe import RecipeError

CASCADE2 = REPO_ROOT / "recipes" / "cascade2.yaml"
ORDER = ["if_rl", "multi_domain_rl", "mopd", "rlhf", "long_context_rl", "code_rl", "swe_rl"]


def _data() -> dict:
    return yaml.safe_load(CASCADE2.read_text())


def test_cascade2_recipe_validates_in_its_order() -> None:
    recipe = load_recipe(CASCADE2)
    assert recipe.stage_order == "cascade2" and [s.name for s in recipe.rl_stages] == ORDER
    assert [s.kind for s in recipe.rl_stages][:3] == ["if", "multi_domain", "mopd"]
    assert len(recipe.sft_stages) == 1
    with pytest.raises(RecipeError, match="against the cascade order"):
        parse_recipe(_data() | {"stage_order": "cascade"})  # Cascade 1's order refuses it


def test_the_proof_recipe_extends_cascade2_with_bigger_evals_and_a_patch_sized_swe_budget() -> None:
    proof, base = load_recipe(REPO_ROOT / "recipes" / "cascade2_proof.yaml"), load_recipe(CASCADE2)
    assert proof.stage_order == "cascade2" and [s.name for s in proof.rl_stages] == ORDER
    assert [s.kind for s in proof.rl_stages] == [s.kind for s in base.rl_stages] and proof.seed == base.seed
    evals = {b.eval_domain: b for b in proof.benchmarks if b.eval_domain}
    assert len(evals) == 8 and {b.eval_limit for b in evals.values()} == {128}
    assert evals["swe"].eval_max_new_tokens == 128 > proof.evals.max_new_tokens  # a patch does not fit in 48
    assert all(b.eval_max_new_tokens is None for d, b in evals.items() if d != "swe")


def test_teacher_checks_name_field_paths() -> None:
    data = _data()
    mopd = data["rl_stages"][2]
    mopd["options"]["teachers"] = {"math": "rlhf", "instruction": "nope", "default": "mopd"}
    with pytest.raises(RecipeError) as err:
        parse_recipe(data)
    text = str(err.value)
    assert "rl_stages.2.options.teachers.math: teacher 'rlhf' is trained after this stage" in text
    assert "rl_stages.2.options.teachers.instruction: teacher 'nope' is not a checkpoint stage" in text
    assert "rl_stages.2.options.teachers.default: the stage cannot be its own teacher" in text
    data = _data()
    del data["rl_stages"][2]["options"]
    data["rl_stages"][0]["options"] = {"mix": {"mcqa": 1.0}}
    data["rl_stages"][1]["options"]["mix"]["chat"] = 0.5
    data["rl_stages"][3]["train"] = {**data["rl_stages"][3].get("train", {}), "backend": "nccl"}
    with pytest.raises(RecipeError) as err:
        parse_recipe(data)
    text = str(err.value)
    assert "rl_stages.2.options: teachers: Field required" in text
    assert "rl_stages.0.options: kind 'if' takes no options" in text
    assert "rl_stages.1.options.mix.chat: a multi_domain stage mixes mcqa, tool_call, structured_output" in text
    assert "rl_stages.3.train.backend: unknown backend 'nccl'; registered backends: deepspeed, torch, trl" in text


def tiny_cascade2() -> dict:
    """cascade2.yaml shrunk like tiny.yaml: tiny random model, 24 rows per source, 1-2 steps per stage."""
    data = copy.deepcopy(_data())
    data["name"], data["model"] = "cascade2_tiny", {"base": "tiny"}
    for source in data["sources"]:
        source["limit"] = 24
    # Two held-out domains keep the forgetting matrix while sparing CPU time (code/SWE evals run sandboxes).
    data["benchmarks"] = [b | ({"eval_limit": 2} if "eval_limit" in b else {}) for b in data["benchmarks"]
                          if b["name"] not in ("eval_code", "eval_swe", "eval_chat")]
    data["sft_stages"][0]["max_tokens"] = 256
    data["sft_stages"][0]["train"] = {"epochs": 1, "batch_size": 4, "learning_rate": 5.0e-5, "max_length": 256, "max_steps": 2}
    data["reward_model"]["train"] = {"epochs": 1, "batch_size": 4, "learning_rate": 5.0e-5, "max_steps": 2}
    caps = {"if_rl": 8, "multi_domain_rl": 24, "mopd": 8}
    for stage in data["rl_stages"]:
        stage["train"] = {"max_steps": 2, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 8,
                          "learning_rate": 2.0e-6, "temperature": 1.0}
        if stage["name"] in caps:
            stage["max_prompts"] = caps[stage["name"]]
        if stage["name"] == "multi_domain_rl":
            stage["train"]["prompts_per_step"] = 4
        if stage["name"] == "long_context_rl":
            stage["train"] |= {"max_new_tokens": 8, "length_schedule": [[1, 12]]}
    # A random tiny model learns nothing in 2 steps: the gates warn instead of stopping the graph (as in tiny.yaml).
    data["evals"] = {"max_new_tokens": 8, "modes": ["no_think"], "blocking": False, "training_signal_blocking": False}
    return data


@pytest.fixture(scope="module")
def cascade2(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("cascade2")
    recipe = home / "cascade2_tiny.yaml"
    recipe.write_text(yaml.safe_dump(tiny_cascade2(), sort_keys=False))
    mp = pytest.MonkeyPatch()
    mp.setenv("CASCADE_HOME", str(home))
    mp.setenv("DAGSTER_HOME", str(home / "dagster"))
    assert main(["run", "--recipe", str(recipe)]) == 0
    yield recipe
    mp.undo()


def _json(capsys, *args: str):
    capsys.readouterr()
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # the whole tiny Cascade 2 graph runs in the first test's fixture
def test_cascade2_materializes_end_to_end(cascade2: Path, capsys) -> None:
    status = {r["asset"]: r for r in _json(capsys, "status", "--recipe", str(cascade2), "--json")}
    assert {"base_model", "sft", "reward_model", *ORDER, "forgetting_matrix"} <= set(status)
    assert all(r["materialized"] for r in status.values()), [a for a, r in status.items() if not r["materialized"]]
    assert not [a for a, r in status.items() if r["stale"]]
    tree = _json(capsys, "lineage", "mopd", "--recipe", str(cascade2), "--json")
    direct = {node["asset"] for node in tree["inputs"]}
    assert {"multi_domain_rl", "sft", "if_rl", "mopd_prompts"} <= direct  # parent + every teacher by asset
    record = json.loads((Path(tree["path"]) / "lineage.json").read_text())
    assert record["algorithm"] == "mopd" and set(record["config"]["teachers"]) == {"math", "instruction", "default"}
    assert record["summary"]["final_metrics"]["clipped_frac"] >= 0.0
    md = json.loads((Path(_json(capsys, "lineage", "multi_domain_rl", "--recipe", str(cascade2), "--json")["path"])
                     / "lineage.json").read_text())
    assert md["algorithm"] == "multi_domain" and sum(md["summary"]["drawn"].values()) == 2 * 4


MD = ["mcqa", "tool_call", "structured_output"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_report_shows_each_multi_domain_eval(cascade2: Path, capsys, tmp_path: Path) -> None:
    """The multi-domain stage's three held-out sets are scored, each gets its own `learned` line,
    and later stages guard all three against forgetting."""
    out = tmp_path / "report.json"
    capsys.readouterr()
    assert main(["report", "--recipe", str(cascade2), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    stages = {e["stage"]: e for e in report["stages"]}
    md = stages["multi_domain_rl"]
    assert md["own_domain"] == "mcqa" and md["own_domains"] == MD
    assert list(md["gates"]["learned_by_domain"]) == MD
    for d in MD:
        assert f"learned {d}: " in text and f"learned {d}: missing" not in text
        assert "p_value" in md["gates"]["learned_by_domain"][d]
        for stage in ("if_rl", "multi_domain_rl"):  # the gain's two sides were scored
            assert report["matrix"][stage][d]["n"] == 2, (stage, d)
    assert "no_eval_domain" not in json.dumps(md)
    assert set(MD) <= {r["domain"] for r in stages["rlhf"]["gates"]["no_forgetting"]["domains"]}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_retrained_teacher_makes_mopd_stale(cascade2: Path, capsys) -> None:
    # Retrain only the IF-RL teacher (a changed learning rate): a new data version of a direct
    # input of MOPD, besides its parent chain.
    override = ["--set", "rl_stages.if_rl.train.learning_rate=3.0e-6"]
    assert main(["run", "--select", "if_rl", "--recipe", str(cascade2), *override]) == 0
    status = {r["asset"]: r for r in _json(capsys, "status", "--recipe", str(cascade2), "--json", *override)}
    assert not status["if_rl"]["stale"] and not status["sft"]["stale"]
    assert status["mopd"]["stale"] and status["multi_domain_rl"]["stale"]
    causes = " ".join(status["mopd"]["stale_causes"])
    assert "if_rl" in causes, status["mopd"]["stale_causes"]
