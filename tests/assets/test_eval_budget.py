"""A benchmark's own eval budget (`eval_max_new_tokens`) versions its domain's evals and nothing else,
and leaves the versions of sets without one as they were before the field existed."""

from __future__ import annotations

from assets.eval_versions import EVAL_CODE, domain_code_version
from spec.hashing import closure_version, stable_hash
from spec.paths import REPO_ROOT
from spec.recipe import load_recipe

RECIPE = REPO_ROOT / "recipes" / "tiny.yaml"


def _with_budget(recipe, bench_name: str, tokens: int | None):
    benches = [b.model_copy(update={"eval_max_new_tokens": tokens}) if b.name == bench_name else b
               for b in recipe.benchmarks]
    return recipe.model_copy(update={"benchmarks": benches})


def test_a_budget_re_versions_its_domain_only():
    recipe = load_recipe(RECIPE)
    swe = next(b for b in recipe.benchmarks if b.eval_domain == "swe")
    longer = _with_budget(recipe, swe.name, 128)
    assert domain_code_version(longer, "swe") != domain_code_version(recipe, "swe")
    assert domain_code_version(_with_budget(recipe, swe.name, 96), "swe") != domain_code_version(longer, "swe")
    for domain in ("math", "ifeval", "code", "rm"):
        assert domain_code_version(longer, domain) == domain_code_version(recipe, domain)


def test_no_budget_keeps_the_version_it_had_before_the_field():
    """The version formula of a set without its own budget: the earlier one, term for term (a home
    made before the field keeps every eval fresh)."""
    from generation.engine import ENGINES
    from rewards.registry import reward_code_versions
    from spec.kinds import eval_reward_for

    recipe = load_recipe(RECIPE)
    assert recipe.evals.workers == 1 and recipe.evals.engine == "hf"
    benches = [b for b in recipe.benchmarks if b.eval_domain == "math"]
    assert benches and not any(b.tts or b.eval_max_new_tokens for b in benches)
    before = stable_hash({"code": closure_version([*EVAL_CODE, ENGINES["hf"]]),
                          "rewards": reward_code_versions([eval_reward_for("math")]),
                          "sets": [b.model_dump(mode="json", include={"eval_limit", "tts"}) for b in benches]})
    assert domain_code_version(recipe, "math") == before
