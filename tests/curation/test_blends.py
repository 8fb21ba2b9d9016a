"""SFT stage blends: upsampling, token caps, SWE split, cross-source dedup, determinism and
the row-accounting identity."""

from __future__ import annotations

import pyarrow as pa
import pytest

from curation.blends import BlendConfig, BlendSource, blend
from curation.schemas import DOMAIN_SCHEMAS, SFT_SCHEMA
from curation.swe import SweSplitConfig

GOLD = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n def f(xs):\n-    return xs[1:]\n+    return xs[0:]\n \n"
WRONG = "--- a/o.py\n+++ b/o.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"


def words(texts):
    return [len(t.split()) for t in texts]


def table(domain, rows):
    fields = [f.name for f in DOMAIN_SCHEMAS[domain]]
    return pa.Table.from_pylist([{f: r.get(f) for f in fields} for r in rows], schema=DOMAIN_SCHEMAS[domain])


def math_rows(n, source="m", long=False, start=0):
    pad = " and so on" * 40 if long else ""
    return [{"row_id": f"{source}{i}", "source": source, "prompt": f"What is {i} + {i}?", "answer": str(2 * i),
             "think_response": f"<think>{i} plus {i}{pad}</think>\\boxed{{{2 * i}}}",
             "no_think_response": f"\\boxed{{{2 * i}}}"} for i in range(start, start + n)]


def science_rows(n):
    return [{"row_id": f"s{i}", "source": "sci", "prompt": f"Force for mass {i} kg at 2 m/s^2?", "answer": str(2 * i),
             "think_response": f"<think>F = ma</think>\\boxed{{{2 * i}}}", "no_think_response": f"\\boxed{{{2 * i}}}"}
            for i in range(n)]


def check_identity(result):
    assert result.rows_in == result.table.num_rows + sum(result.dropped.values())
    assert result.table.schema == SFT_SCHEMA


def test_integer_and_fractional_upsampling_with_accounting():
    src = [BlendSource("m", "math", table("math", math_rows(10))), BlendSource("sci", "science", table("science", science_rows(20)))]
    out = blend(src, BlendConfig(upsample={"science": 2.5, "math": 0.5}, seed=3))
    check_identity(out)
    domains = out.table.column("domain").to_pylist()
    assert 20 * 2 * 2 < domains.count("science") < 20 * 2 * 3  # 2 copies each, plus ~half a third
    assert 0 < domains.count("math") < 20 and out.dropped["downsampled"] == 20 - domains.count("math")
    assert out.added["science"] == domains.count("science") - 40
    assert len(set(out.table.column("row_id").to_pylist())) == out.table.num_rows


def test_deterministic_and_seed_dependent_shuffle():
    src = [BlendSource("m", "math", table("math", math_rows(30)))]
    a, b = blend(src, BlendConfig(seed=1)), blend(src, BlendConfig(seed=1))
    c = blend(src, BlendConfig(seed=2))
    assert a.table.equals(b.table)
    assert a.table.column("row_id").to_pylist() != c.table.column("row_id").to_pylist()
    assert sorted(a.table.column("row_id").to_pylist()) == sorted(c.table.column("row_id").to_pylist())


def test_token_caps_use_the_given_counter():
    src = [BlendSource("m", "math", table("math", math_rows(3) + math_rows(2, source="long", long=True, start=10)))]
    out = blend(src, BlendConfig(max_tokens=120, min_answer_tokens={"math": 2}), count_tokens=words)
    check_identity(out)
    assert out.dropped == {"over_max_tokens": 2, "short_answer": 5}  # long think rows; 1-word no-think answers
    assert set(out.table.column("mode").to_pylist()) == {"think"}
    with pytest.raises(ValueError):
        blend(src, BlendConfig(max_tokens=10))


def test_cross_source_exact_dedup_of_whole_examples():
    first = math_rows(3, source="a")
    second = [dict(r, row_id="b" + r["row_id"], source="b", prompt=r["prompt"].upper() + "  ") for r in math_rows(3)]
    out = blend([BlendSource("a", "math", table("math", first)), BlendSource("b", "math", table("math", second))])
    check_identity(out)
    assert out.dropped == {"duplicate_example": 6}
    assert set(out.table.column("source").to_pylist()) == {"a"}


def paper_shaped(prompts, responses, source="m"):
    """Several different responses per prompt, as the paper's SFT data (7.8 per math prompt)."""
    return [{"row_id": f"{source}{p}_{r}", "source": source, "prompt": f"What is {p} + {p}?", "answer": str(2 * p),
             "think_response": f"<think>attempt {r}: {p} plus {p}</think>\\boxed{{{2 * p}}}",
             "no_think_response": None} for p in range(prompts) for r in range(responses)]


def test_several_responses_per_prompt_survive_and_the_cap_counts_its_drops():
    rows = paper_shaped(4, 5)
    out = blend([BlendSource("m", "math", table("math", rows + rows[:3]))], BlendConfig(modes=("think",)))
    check_identity(out)
    assert out.table.num_rows == 20 and out.dropped == {"duplicate_example": 3}
    capped = blend([BlendSource("m", "math", table("math", rows))],
                   BlendConfig(modes=("think",), max_responses_per_prompt={"m": 2}))
    check_identity(capped)
    assert capped.table.num_rows == 8 and capped.dropped == {"over_responses_per_prompt": 12}
    kept = sorted(capped.table.column("row_id").to_pylist())
    assert kept == sorted(f"m{p}_{r}-think" for p in range(4) for r in range(2))  # the first two per prompt


def test_swe_sources_keep_only_the_sft_side():
    inst = [{"row_id": f"w{i}", "source": "swe", "repo": "acme/lib", "base_commit": f"c{i}", "issue": f"bug {i}",
             "code_context": "def f(xs):\n    return xs[1:]\n", "golden_patch": GOLD,
             "candidate_patches": [GOLD] * (5 if i % 2 else 2) + [WRONG] * (3 if i % 2 else 6)} for i in range(6)]
    inst.append(dict(inst[0], row_id="x", repo="django/django", base_commit="z"))
    out = blend([BlendSource("swe", "swe", table("swe", inst))],
                BlendConfig(upsample={"swe": 3}, swe=SweSplitConfig(exclude_repos=["django/django"])))
    check_identity(out)
    assert out.dropped == {"swe_to_rl": 3, "swe:benchmark_repo": 1}
    assert out.table.num_rows == 9 and out.added == {"swe": 6}
    assert set(out.table.column("mode").to_pylist()) == {"no_think"}
    assert "```diff\n--- a/m.py" in out.table.column("text")[0].as_py()


def test_recipe_adapter():
    from curation.blends import blend_sft
    from dagster_project.recipe import load_recipe

    recipe = load_recipe()
    stage = recipe.sft_stages[1]
    cfg = BlendConfig.from_recipe(stage, recipe.curation.swe, recipe.seed)
    assert cfg.upsample == {"science": 2, "swe": 3} and cfg.max_tokens == stage.max_tokens
    out = blend_sft({"m": ("math", table("math", math_rows(4)))}, cfg, count_tokens=words)
    check_identity(out)
    assert out.table.num_rows == 8
