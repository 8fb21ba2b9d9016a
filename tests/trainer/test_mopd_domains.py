"""MOPD is judged on its teachers' domains: `teacher_domains` follows the recipe's source -> row
domain -> teacher routing to the eval domains of each teacher's rows (leaving out the rows routed
to the stage's own input checkpoint), the routing is trainer.mopd's, and the cascade report gives
MOPD one `learned` verdict per such domain, naming the teacher and its score, never `no_eval_domain`."""

from __future__ import annotations

import json

import pytest
import yaml

from spec.kinds import stage_kind
from spec.paths import REPO_ROOT
from spec.recipe import parse_recipe
from spec.train import MOPDSettings, StageOptions
from trainer.cascade_report import build_report, render_markdown, render_text, teacher_domains
from trainer.mopd import teacher_key


def _recipe(teachers: dict[str, str] | None = None, **mopd):
    data = yaml.safe_load((REPO_ROOT / "recipes" / "cascade2.yaml").read_text())
    if teachers is not None:
        data["rl_stages"][2]["options"]["teachers"] = teachers
    if "generations" in mopd:
        data["generations"] = mopd.pop("generations")
    data["rl_stages"][2].update(mopd)
    recipe = parse_recipe(data)
    names = [s.name for s in [*recipe.sft_stages, *recipe.rl_stages]]
    return recipe, dict(zip(names, ["base_model", *names[:-1]]))


def test_cascade2_mopd_is_judged_on_the_domains_its_teachers_teach() -> None:
    recipe, parents = _recipe()
    assert parents["mopd"] == "multi_domain_rl"
    # math rows -> sft -> eval_math (math); instruction rows -> if_rl -> eval_ifeval (ifeval). The
    # multi-domain rows go to `default` = multi_domain_rl, the student's own start: nothing to learn.
    assert teacher_domains(recipe, parents) == {"mopd": {"math": "sft", "ifeval": "if_rl"}}


def test_default_teacher_other_than_the_parent_adds_its_domains() -> None:
    recipe, parents = _recipe({"math": "sft", "default": "if_rl"})
    assert teacher_domains(recipe, parents) == {"mopd": {
        "math": "sft", "ifeval": "if_rl", "mcqa": "if_rl", "tool_call": "if_rl", "structured_output": "if_rl"}}
    recipe, parents = _recipe({"instruction": "multi_domain_rl", "default": "multi_domain_rl"})
    assert teacher_domains(recipe, parents) == {}  # every row routed to the parent: judged on none


def test_a_generated_prompt_set_has_its_input_sources_domain() -> None:
    pass_rate = {"name": "math_filtered", "input": "math_prompts", "use": "pass_rate", "verify": "math",
                 "model": "sft", "samples": 4}
    recipe, parents = _recipe(generations=[pass_rate], sources=["math_filtered", "if_prompts"])
    assert teacher_domains(recipe, parents) == {"mopd": {"math": "sft", "ifeval": "if_rl"}}


def test_teachers_of_routes_as_the_trainer_does() -> None:
    settings = MOPDSettings(teachers={"math": "sft", "instruction": "if_rl", "default": "multi_domain_rl"})
    domains = stage_kind("mopd").source_domains
    assert settings.teachers_of(domains) == {d: settings.teachers[teacher_key(d, settings.teachers)] for d in domains}
    only = MOPDSettings(teachers={"math": "sft"})
    assert only.teachers_of(["math", "chat"]) == {"math": "sft"}  # no `default`: chat has no teacher
    assert StageOptions().teachers_of(domains) == {}  # other kinds: judged on their kind's domains


def _cells(passes: dict[str, list[float]]) -> dict:
    return {d: {"no_think": {"score": 100 * sum(r) / len(r), "n": len(r), "rows": {f"r{i}": s for i, s in enumerate(r)}}}
            for d, r in passes.items()}


HIGH, LOW = [1.0] * 30 + [0.0] * 10, [1.0] * 10 + [0.0] * 30  # 75 and 25 points on 40 rows
STAGES = ["base_model", "sft", "if_rl", "md_rl", "mopd", "rlhf"]
PARENTS = dict(zip(STAGES, [None, *STAGES[:-1]]))
EVALS = {
    "base_model": None,
    "sft": _cells({"math": HIGH, "ifeval": LOW}),
    "if_rl": _cells({"math": LOW, "ifeval": HIGH, "mcqa": LOW}),
    "md_rl": _cells({"math": LOW, "ifeval": HIGH, "mcqa": HIGH}),
    "mopd": _cells({"math": HIGH, "ifeval": HIGH, "mcqa": HIGH, "rm": LOW}),  # math back to its teacher's
    "rlhf": _cells({"math": LOW, "ifeval": HIGH, "mcqa": HIGH, "rm": HIGH}),  # and forgotten again
}


@pytest.fixture
def report() -> dict:
    own = {"if_rl": ["ifeval"], "md_rl": ["mcqa"], "mopd": ["math", "ifeval"], "rlhf": ["rm"]}
    return build_report(STAGES, PARENTS, own, ["math", "ifeval", "mcqa", "rm"], EVALS, {}, tolerance=2.0,
                        teachers={"mopd": {"math": "sft", "ifeval": "if_rl"}})


def test_report_judges_mopd_on_its_teachers_domains(report) -> None:
    by = {e["stage"]: e for e in report["stages"]}
    mopd = by["mopd"]
    assert mopd["own_domains"] == ["math", "ifeval"] and "no_eval_domain" not in json.dumps(mopd)
    math, ifeval = mopd["gates"]["learned_by_domain"]["math"], mopd["gates"]["learned_by_domain"]["ifeval"]
    assert math["passed"] and math["gain"] == pytest.approx(50.0) and math["parent"] == pytest.approx(25.0)
    assert (math["teacher"], math["teacher_score"], math["child"]) == ("sft", 75.0, 75.0)  # reached its teacher
    assert ifeval["status"] == "no_gain" and (ifeval["teacher"], ifeval["teacher_score"]) == ("if_rl", 75.0)
    assert mopd["gates"]["learned"]["status"] == "not_all_learned"
    assert "teacher" not in by["md_rl"]["gates"]["learned"]  # stages without teachers: as before
    # A domain MOPD is judged on is guarded from then on: RLHF drops math back to 25 points.
    rows = {r["domain"]: r for r in by["rlhf"]["gates"]["no_forgetting"]["domains"]}
    assert rows["math"]["status"] == "forgot" and rows["math"]["drop"] == pytest.approx(50.0)
    json.dumps(report)


def test_report_without_the_teachers_score_says_so() -> None:
    evals = {**EVALS, "sft": _cells({"ifeval": LOW})}  # the teacher was never scored on math
    rep = build_report(STAGES, PARENTS, {"mopd": ["math"]}, ["math", "ifeval"], evals, {}, tolerance=2.0,
                       teachers={"mopd": {"math": "sft"}})
    g = rep["stages"][3]["gates"]["learned"]
    assert g["teacher"] == "sft" and g["teacher_score"] is None
    assert "learned math: +50.0" in render_text(rep) and "teacher sft not evaluated" in render_text(rep)


def test_renderings_name_each_teacher(report) -> None:
    text = render_text(report)
    assert "learned math: +50.0" in text and "; teacher sft 75.0" in text
    assert "learned ifeval: +0.0" in text and "; teacher if_rl 75.0" in text
    md = render_markdown(report)
    assert "| mopd | math | +50.0" in md and "teacher sft 75.0 |" in md
    assert "| mopd | ifeval | +0.0" in md
