"""RL prompt sets: verifier columns per kind, SFT / earlier-stage disjointness, alternating
modes, the cap and the row-accounting identity."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from curation.blends import BlendConfig, BlendSource, blend
from curation.chat import sft_rows
from curation.prompts import PromptSetConfig, PromptSource, build_prompt_set, prompt_key, sft_prompt_keys
from curation.samples import records
from curation.schemas import DOMAIN_SCHEMAS, RL_SCHEMA


def table(domain, rows):
    fields = [f.name for f in DOMAIN_SCHEMAS[domain]]
    return pa.Table.from_pylist([{f: r.get(f) for f in fields} for r in rows], schema=DOMAIN_SCHEMAS[domain])


def canon(name, domain, n=None):
    rows = [r for r in records(name, 1234) if isinstance(r, dict)][:n]
    return table(domain, [dict(r, row_id=f"{name}{i}", source=name) for i, r in enumerate(rows)])


def check(result):
    assert result.rows_in == result.table.num_rows + sum(result.dropped.values())
    assert result.table.schema == RL_SCHEMA


def test_math_prompts_carry_answers_and_alternate_modes():
    src = [PromptSource("math_prompts", "math", canon("math_rl", "math", 40))]
    out = build_prompt_set("math_rl", src, PromptSetConfig(kind="math", seed=1))
    check(out)
    assert out.table.num_rows == 40 and out.dropped == {}
    modes = out.table.column("mode").to_pylist()
    assert all(modes[i:i + 2].count("think") == 1 for i in range(0, 40, 2))
    assert all(a for a in out.table.column("answer").to_pylist())
    again = build_prompt_set("math_rl", src, PromptSetConfig(kind="math", seed=1))
    assert again.table.equals(out.table)


def test_if_code_and_swe_columns():
    if_set = build_prompt_set("if_rl", [PromptSource("p", "instruction", canon("instruction_rl", "instruction", 10))],
                              PromptSetConfig(kind="if"))
    row = if_set.table.to_pylist()[0]
    assert row["instruction_id_list"] and json.loads(row["kwargs"])
    code = build_prompt_set("code_rl", [PromptSource("c", "code", canon("code_rl", "code", 10))], PromptSetConfig(kind="code"))
    assert all(json.loads(t)["kind"] in ("stdio", "assert") for t in code.table.column("tests").to_pylist())
    swe = build_prompt_set("swe_rl", [PromptSource("s", "swe", canon("swe_pool", "swe"))],
                           PromptSetConfig(kind="swe", modes=("no_think",)))
    check(swe)
    assert swe.table.num_rows >= 10 and swe.dropped["swe_to_sft"] >= 10 and "swe:no_signal" in swe.dropped
    first = swe.table.to_pylist()[0]
    assert first["golden_patch"].startswith("--- a/") and first["code_context"] in first["prompt"]
    assert set(swe.table.column("mode").to_pylist()) == {"no_think"}


def test_disjoint_from_sft_and_earlier_stages_and_capped():
    chat = canon("chat_rl", "chat", 30).to_pylist()
    # SFT corpus containing the first 5 RL prompts (rendered with a mode suffix)
    sft_src = [dict(r, think_response="<think>x</think>ok", no_think_response="ok") for r in chat[:5]]
    sft_table, _ = sft_rows(sft_src, "chat")
    earlier = build_prompt_set("rlhf_a", [PromptSource("c", "chat", table("chat", chat[5:10]))], PromptSetConfig(kind="rlhf"))
    out = build_prompt_set("rlhf_b", [PromptSource("c", "chat", table("chat", chat + chat[:2]))],
                           PromptSetConfig(kind="rlhf", max_prompts=12),
                           sft_keys=sft_prompt_keys([sft_table]), earlier={"rlhf_a": earlier.table})
    check(out)
    assert out.dropped == {"overlaps_sft": 7, "overlaps_rl:rlhf_a": 5, "over_cap": 8}
    keys = {prompt_key(p) for p in out.table.column("prompt").to_pylist()}
    assert not keys & sft_prompt_keys([sft_table])


def test_kind_checks_domains_and_required_columns():
    with pytest.raises(ValueError):
        build_prompt_set("x", [PromptSource("c", "code", canon("code_rl", "code", 2))], PromptSetConfig(kind="math"))
    rows = [{"row_id": "a", "source": "s", "prompt": "2+2?", "answer": None}]
    out = build_prompt_set("m", [PromptSource("s", "math", pa.Table.from_pylist(rows))], PromptSetConfig(kind="math"))
    assert out.dropped == {"missing_answer": 1} and out.table.num_rows == 0


def test_default_data_sft_blend_and_rl_prompts_are_disjoint():
    sft = blend([BlendSource("chat_sft", "chat", canon("chat_sft", "chat")),
                 BlendSource("math_sft", "math", canon("math_sft", "math"))], BlendConfig())
    keys = sft_prompt_keys([sft.table])
    math = build_prompt_set("math_rl", [PromptSource("m", "math", canon("math_rl", "math"))], PromptSetConfig(kind="math"),
                            sft_keys=keys)
    chat = build_prompt_set("rlhf", [PromptSource("c", "chat", canon("chat_rl", "chat"))], PromptSetConfig(kind="rlhf"),
                            sft_keys=keys)
    # the generators keep RL prompts out of SFT by construction: nothing to drop
    assert math.dropped == {} and chat.dropped == {}


def test_recipe_adapters_match_the_asset_layer_calls():
    from curation.prompts import eval_rows, rl_prompt_set
    from dagster_project.recipe import load_recipe

    recipe = load_recipe()
    stage = next(s for s in recipe.rl_stages if s.kind == "math")
    cfg = PromptSetConfig.from_recipe(stage, recipe.curation.swe, recipe.seed)
    assert cfg.kind == "math" and cfg.stage == stage.name and "django/django" in cfg.swe.exclude_repos
    sft = blend([BlendSource("math_sft", "math", canon("math_sft", "math", 20))], BlendConfig())
    rl_src = canon("math_rl", "math", 10).to_pylist()
    sft_prompt = sft_prompt_keys([sft.table]).pop()
    rl_src[0]["prompt"] = next(r["prompt"] for r in canon("math_sft", "math", 20).to_pylist() if prompt_key(r["prompt"]) == sft_prompt)
    out = rl_prompt_set({"math_prompts": ("math", table("math", rl_src))}, cfg, exclude_sft=[sft.table])
    assert out.dropped == {"overlaps_sft": 1} and out.table.num_rows == 9
    ev = eval_rows(canon("swe_eval", "swe", 4), "swe", "eval_swe")
    assert ev.schema == RL_SCHEMA and ev.num_rows == 4 and all(ev.column("golden_patch").to_pylist())
