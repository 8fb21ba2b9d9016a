"""A wrong recipe fails at load, before anything runs, naming every bad field (issue: recipes
checked at load). Each case breaks the default recipe one way and names the field path the
error must contain; the CLI turns any of them into exit code 2 with no traceback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from dagster_project.recipe import load_recipe, parse_recipe
from spec.paths import REPO_ROOT
from spec.recipe import RecipeError

DEFAULT = yaml.safe_load((REPO_ROOT / "recipes" / "default.yaml").read_text())
RL = {s["name"]: i for i, s in enumerate(DEFAULT["rl_stages"])}
MATH = RL["math_rl"]


@pytest.fixture(autouse=True)
def _private_home(cascade_home: Path) -> None:
    """Sample files that a real `.cascade/` holds must not make missing-file cases pass."""


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def mutate(data: dict) -> None:
        *head, last = path.split(".")
        node: Any = data
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return mutate


def _delete(path: str) -> Callable[[dict], None]:
    def mutate(data: dict) -> None:
        *head, last = path.split(".")
        node: Any = data
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node[k]
        del node[last]
    return mutate


def _swap_rl(a: str, b: str) -> Callable[[dict], None]:
    def mutate(data: dict) -> None:
        stages = data["rl_stages"]
        stages[RL[a]], stages[RL[b]] = stages[RL[b]], stages[RL[a]]
    return mutate


def _append(section: str, item: Any) -> Callable[[dict], None]:
    return lambda data: data[section].append(copy.deepcopy(item))


CASES: list[tuple[str, Callable[[dict], None], str]] = [
    # types
    ("max_steps_words", _set(f"rl_stages.{MATH}.train.max_steps", "two"), f"rl_stages.{MATH}.train.max_steps"),
    ("seed_text", _set("seed", "abc"), "seed"),
    ("train_block_string", _set("rl_stages.1.train", "fast"), "rl_stages.1.train"),
    ("sources_not_a_list", _set("sources", "chat_sft"), "sources"),
    ("ngram_text", _set("curation.decontam.ngram", "nine"), "curation.decontam.ngram"),
    ("modes_bad_value", _set("rl_stages.0.modes", ["thinking"]), "rl_stages.0.modes.0"),
    # ranges
    ("negative_learning_rate", _set(f"rl_stages.{MATH}.train.learning_rate", -1e-5), f"rl_stages.{MATH}.train.learning_rate"),
    ("zero_sft_batch_size", _set("sft_stages.0.train.batch_size", 0), "sft_stages.0.train.batch_size"),
    ("zero_prompts_per_step", _set(f"rl_stages.{MATH}.train.prompts_per_step", 0), f"rl_stages.{MATH}.train.prompts_per_step"),
    ("one_generation", _set(f"rl_stages.{MATH}.train.num_generations", 1), f"rl_stages.{MATH}.train.num_generations"),
    ("top_p_above_one", _set("rl_stages.0.train.top_p", 1.5), "rl_stages.0.train.top_p"),
    ("rm_zero_batch", _set("reward_model.train.batch_size", 0), "reward_model.train.batch_size"),
    ("eval_zero_tokens", _set("evals.max_new_tokens", 0), "evals.max_new_tokens"),
    ("near_dup_threshold", _set("curation.dedup.near.threshold", 1.5), "curation.dedup.near.threshold"),
    ("negative_upsample", _set("sft_stages.1.upsample", {"science": -2}), "sft_stages.1.upsample.science"),
    ("upsample_unknown_domain", _set("sft_stages.1.upsample", {"sciense": 2}), "sft_stages.1.upsample.sciense"),
    ("negative_reward_weight", _set(f"rl_stages.{MATH}.rewards.0.weight", -1.0), f"rl_stages.{MATH}.rewards.0.weight"),
    ("eval_limit_zero", _set("benchmarks.2.eval_limit", 0), "benchmarks.2.eval_limit"),
    ("tts_k_one", _set("benchmarks.2.tts", {"k": 1, "select": "majority"}), "benchmarks.2.tts.k"),
    ("tts_unknown_selector", _set("benchmarks.2.tts", {"k": 4, "select": "best"}), "benchmarks.2.tts.select"),
    ("tts_verifier_without_tests", _set("benchmarks.2.tts", {"k": 4, "select": "verifier"}), "benchmarks.2.tts.select"),
    ("tts_on_a_decontam_only_set", _set("benchmarks.0.tts", {"k": 4, "select": "majority"}), "benchmarks.0.tts"),
    ("eval_scope_unknown", _set("evals.scope", "some"), "evals.scope"),
    # unknown keys
    ("unknown_top_level_key", _set("stages", []), "stages"),
    ("unknown_train_key", _set(f"rl_stages.{MATH}.train.lerning_rate", 1e-5), f"rl_stages.{MATH}.train.lerning_rate"),
    ("unknown_source_key", _set("sources.0.colums", {}), "sources.0.colums"),
    ("unknown_stage_key", _set("rl_stages.0.learning_rate", 1.0), "rl_stages.0.learning_rate"),
    # names and references
    ("unknown_stage_kind", _set("rl_stages.0.kind", "dpo"), "rl_stages.0.kind"),
    ("sft_kind_in_rl", _set("rl_stages.0.kind", "sft"), "rl_stages.0.kind"),
    ("unknown_source_ref", lambda d: d["sft_stages"][0]["sources"].append("nope"), "sft_stages.0.sources.7"),
    ("source_domain_mismatch", _set(f"rl_stages.{MATH}.sources", ["code_prompts"]), f"rl_stages.{MATH}.sources.0"),
    ("duplicate_source", _append("sources", DEFAULT["sources"][0]), f"sources.{len(DEFAULT['sources'])}.name"),
    ("duplicate_stage", _set("rl_stages.1.name", "rlhf"), "rl_stages.1.name"),
    ("bad_name", _set("rl_stages.0.name", "Bad Name"), "rl_stages.0.name"),
    ("unknown_reward", _set(f"rl_stages.{MATH}.rewards.0.name", "maths"), f"rl_stages.{MATH}.rewards.0.name"),
    ("bad_reward_option", _set("rl_stages.1.rewards.0.options", {"mode": "lose"}), "rl_stages.1.rewards.0"),
    ("reward_import_path_missing", _set(f"rl_stages.{MATH}.rewards.0.name", "no_such_module:score"), f"rl_stages.{MATH}.rewards.0.name"),
    ("rm_reward_without_reward_model", _delete("reward_model"), "rl_stages.0.rewards"),
    ("unknown_domain", _set("sources.0.domain", "poetry"), "sources.0.domain"),
    ("benchmark_two_origins", _set("benchmarks.0.path", "x.jsonl"), "benchmarks.0"),
    ("unknown_eval_domain", _set("benchmarks.2.eval_domain", "poetry"), "benchmarks.2.eval_domain"),
    ("eval_set_without_domain", _delete("benchmarks.2.domain"), "benchmarks.2"),
    ("eval_set_of_another_domain", _set("benchmarks.2.domain", "code"), "benchmarks.2"),
    ("missing_required_sources", _delete("sources"), "sources"),
    # order
    ("reversed_if_and_math", _swap_rl("if_rl", "math_rl"), f"rl_stages.{MATH}.kind"),
    ("swe_before_code", _swap_rl("code_rl", "swe_rl"), f"rl_stages.{RL['swe_rl']}.kind"),
    ("rlhf_last", lambda d: d["rl_stages"].append(d["rl_stages"].pop(0)), f"rl_stages.{len(RL) - 1}.kind"),
    # files
    ("source_file_missing", lambda d: d["sources"][0].pop("generate"), "sources.0.path"),
    ("benchmark_file_missing", lambda d: d["benchmarks"][2].pop("generate"), "benchmarks.2.path"),
    ("model_folder_missing", _set("model.base", "models/does-not-exist"), "model.base"),
]


def _error(data: dict, **kwargs: Any) -> str:
    with pytest.raises(RecipeError) as info:
        parse_recipe(data, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("mutate, where", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_recipe_fails_at_load_naming_the_field(mutate: Callable[[dict], None], where: str) -> None:
    data = copy.deepcopy(DEFAULT)
    mutate(data)
    message = _error(data)
    assert any(line.strip().startswith(f"{where}:") or line.strip().startswith(f"{where}.")
               for line in message.splitlines()), message


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 25


def test_every_problem_is_reported_in_one_message() -> None:
    data = copy.deepcopy(DEFAULT)
    for mutate in (_set(f"rl_stages.{MATH}.train.max_steps", "two"), _set("sources.0.domain", "poetry"),
                   _swap_rl("if_rl", "math_rl"), lambda d: d["sources"][1].pop("generate"),
                   lambda d: d["sft_stages"][0]["sources"].append("nope")):
        mutate(data)
    message = _error(data)
    for where in ("rl_stages.1.train.max_steps", "sources.0.domain", f"rl_stages.{MATH}.kind", "sources.1.path",
                  "sft_stages.0.sources.7"):
        assert where in message, message
    # The unknown domain also makes that source unfit for both SFT stages: 7 lines, one per problem.
    assert f"({len(message.splitlines()) - 1} problems)" in message and len(message.splitlines()) - 1 >= 5


def test_custom_stage_order_is_allowed_when_declared() -> None:
    data = copy.deepcopy(DEFAULT)
    _swap_rl("if_rl", "math_rl")(data)
    data["stage_order"] = "custom"
    assert [s.name for s in parse_recipe(data).rl_stages][1:3] == ["math_rl", "if_rl"]


def test_missing_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path / "none.yaml")
    with pytest.raises(RecipeError, match="not found"):
        load_recipe(tmp_path)  # a folder
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(bad)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(RecipeError, match="UTF-8|YAML"):
        load_recipe(binary)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(RecipeError, match="top level must be a mapping"):
        load_recipe(listing)


def test_relative_paths_resolve_against_the_recipe(tmp_path: Path) -> None:
    data = copy.deepcopy(DEFAULT)
    data["sources"][0].pop("generate")
    data["sources"][0]["path"] = "data/chat.jsonl"
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(yaml.safe_dump(data))
    with pytest.raises(RecipeError, match=r"sources\.0\.path"):
        load_recipe(recipe_file)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "chat.jsonl").write_text("{}\n")  # an empty file would fail at load
    assert load_recipe(recipe_file).resolve("data/chat.jsonl") == tmp_path / "data" / "chat.jsonl"


@pytest.mark.parametrize("mutate", [c[1] for c in CASES[:6]] + [_swap_rl("if_rl", "math_rl")], ids=[c[0] for c in CASES[:6]] + ["order"])
def test_cli_exits_2_without_a_traceback(tmp_path: Path, capsys, mutate: Callable[[dict], None]) -> None:
    from dagster_project.cli import main

    data = copy.deepcopy(DEFAULT)
    mutate(data)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["status", "--recipe", str(path)]) == 2
    err = capsys.readouterr().err
    assert "invalid recipe" in err and "Traceback" not in err


def test_cli_missing_recipe_exits_2(tmp_path: Path, capsys) -> None:
    from dagster_project.cli import main

    assert main(["run", "--recipe", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert "recipe not found" in err and "Traceback" not in err
