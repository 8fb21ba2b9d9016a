"""Cascade 2's multi-domain stage is evaluated on all three of its domains: the eval plan
(`evals.scope: gates`) asks for them where the gates read them, the stage gets ONE `learned`
check over the three, and later stages' no_forgetting guards all three."""

from __future__ import annotations

from assets.common import WorkTimer
from assets.evals import build_eval_assets, eval_plan, own_domains
from dagster_project.recipe import load_recipe
from spec.paths import REPO_ROOT

MD = ["mcqa", "tool_call", "structured_output"]


def test_plan_and_checks_cover_every_own_domain() -> None:
    recipe = load_recipe(REPO_ROOT / "recipes" / "cascade2.yaml")
    assert own_domains(recipe)["multi_domain_rl"] == MD and own_domains(recipe)["mopd"] == ["math", "ifeval"]
    plan = eval_plan(recipe)
    assert set(MD) <= set(plan["if_rl"])  # the multi-domain stage's learned baseline
    assert set(MD) <= set(plan["multi_domain_rl"]) and set(MD) <= set(plan["mopd"])  # and what forgetting reads
    _, checks = build_eval_assets(recipe, WorkTimer())
    specs = {(k.asset_key.path[-1], k.name): spec for c in checks for k, spec in
             zip(c.check_keys, c.check_specs)}
    learned = [name for (asset, name) in specs if asset == "multi_domain_rl" and name == "learned"]
    assert learned == ["learned"]
    assert "each of its own domains (mcqa, tool_call, structured_output)" in specs["multi_domain_rl", "learned"].description
    assert "its own domain (math)" in specs["long_context_rl", "learned"].description
    assert all(d in specs["mopd", "no_forgetting"].description for d in ["ifeval", *MD])
    # MOPD is judged on its teachers' domains (math from sft, ifeval from if_rl), each teacher scored there.
    assert "each of its own domains (math, ifeval)" in specs["mopd", "learned"].description
    assert "math" in plan["sft"] and "math" in specs["rlhf", "no_forgetting"].description
