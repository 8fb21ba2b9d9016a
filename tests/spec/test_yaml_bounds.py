"""Bounded YAML (spec.yaml_load): an anchor bomb fails at load, wherever it sits (top level, a
typed field, a free-form `dict[str, Any]` field, an `extends:` base, a `--set` value), with a
clear message and the CLI's exit 2, before a single large object is built; a recipe with a few
legitimate anchors still loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dagster_project.recipe import load_recipe, parse_recipe
from spec.paths import REPO_ROOT
from spec.recipe import RecipeError
from spec.yaml_load import MAX_NODES, BoundedLoader, YamlBoundsError, check_bounded, load_yaml

TINY = REPO_ROOT / "recipes" / "tiny.yaml"


def _bomb(indent: str, levels: int = 9, width: int = 9) -> str:
    """`levels` anchors of `width` aliases each, as block-YAML mapping lines at `indent`."""
    lines = [f"{indent}a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def _flow_bomb(levels: int = 9, width: int = 9) -> str:
    """The same bomb in one line of flow YAML (what a `--set` value can hold)."""
    parts = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    parts += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "{" + ", ".join(parts) + "}"


def _stage(field_lines: str) -> str:
    return f"extends: {TINY}\nrl_stages:\n  - name: math_rl\n    train:\n{field_lines}"


PLACES = {
    "top_level": f"extends: {TINY}\nx-bomb:\n" + _bomb("  "),
    "typed_field": _stage("      max_steps:\n" + _bomb("        ")),
    "free_form_vllm": _stage("      vllm:\n" + _bomb("        ")),
    "free_form_deepspeed_extra": _stage("      deepspeed:\n        extra:\n" + _bomb("          ")),
    "reward_options": f"extends: {TINY}\nrl_stages:\n  - name: math_rl\n    rewards:\n"
                      f"      - name: math\n        options:\n" + _bomb("          "),
}


@pytest.fixture
def constructed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the Python objects the bounded loader builds (one per node it constructs)."""
    calls = [0]
    construct = BoundedLoader.construct_object

    def counting(self, node, deep=False):
        calls[0] += 1
        return construct(self, node, deep)

    monkeypatch.setattr(BoundedLoader, "construct_object", counting)
    return calls


@pytest.mark.parametrize("place", sorted(PLACES))
def test_a_bomb_fails_at_load_before_anything_is_built(tmp_path: Path, place: str, constructed: list[int]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(PLACES[place])
    with pytest.raises(RecipeError, match=rf"invalid recipe {path}: .*more than {MAX_NODES:,} nodes"):
        load_recipe(path)
    assert constructed[0] == 0  # refused on the composed graph: no object of the document was built


def test_a_bomb_in_an_extends_base_names_the_base(tmp_path: Path, constructed: list[int]) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(PLACES["free_form_vllm"])
    child = tmp_path / "child.yaml"
    child.write_text("extends: base.yaml\nname: child\n")
    with pytest.raises(RecipeError, match=rf"extends: invalid recipe {base}: .*more than {MAX_NODES:,} nodes.*named by {child}"):
        load_recipe(child)
    assert constructed[0] == 5  # the child's own mapping (1 + 2 keys + 2 values); nothing of the base


def test_a_bomb_in_a_set_value_fails_at_load(constructed: list[int]) -> None:
    load_recipe(TINY)
    recipe_alone, constructed[0] = constructed[0], 0
    with pytest.raises(RecipeError, match=r"--set .*more than 100,000 nodes"):
        load_recipe(TINY, overrides=[f"rl_stages.math_rl.train.vllm={_flow_bomb()}"])
    assert constructed[0] == recipe_alone  # the recipe file's own objects, none of the value's


def test_a_shared_python_value_is_bounded_like_yaml() -> None:
    """A mapping built in code (no YAML) with one list shared by reference nine times per level."""
    leaf: list = ["lol"] * 9
    for _ in range(9):
        leaf = [leaf] * 9
    data = yaml.safe_load(TINY.read_text())
    data["rl_stages"][0]["train"]["vllm"] = {"bomb": leaf}
    with pytest.raises(RecipeError, match=r"the recipe expands to more than 100,000 nodes"):
        parse_recipe(data, TINY)


@pytest.mark.parametrize("where", ["file", "set"])
def test_cli_exits_2_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    from dagster_project.cli import main

    path = tmp_path / "r.yaml"
    path.write_text(PLACES["free_form_vllm"] if where == "file" else f"extends: {TINY}\n")
    extra = ["--set", f"rl_stages.math_rl.train.vllm={_flow_bomb()}"] if where == "set" else []
    assert main(["status", "--recipe", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cascade status: error: invalid recipe") and "more than 100,000 nodes" in err
    assert "Traceback" not in err


def test_recursive_and_deep_documents_are_refused() -> None:
    with pytest.raises(YamlBoundsError, match="refers to itself"):
        load_yaml("a: &a [1, *a]")
    with pytest.raises(YamlBoundsError, match="nests deeper than 64 levels"):
        load_yaml("[" * 200 + "]" * 200)
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(YamlBoundsError, match="refers to itself"):
        check_bounded(cyclic)


def test_the_count_is_the_expanded_size() -> None:
    loader = BoundedLoader(_bomb("", levels=2, width=3))
    loader.get_single_data()
    # mapping 1 + a0 (key 1 + list 1 + 3) + a1 (key 1 + list 1 + 3 * 4) + a2 (key 1 + list 1 + 3 * 13)
    assert loader.measured == 1 + 5 + 14 + 41
    with pytest.raises(YamlBoundsError):
        load_yaml(_bomb("", levels=2, width=3), max_nodes=60)


def test_a_recipe_with_a_few_anchors_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(f"extends: {TINY}\n"
                    "rl_stages:\n"
                    "  - {name: math_rl, train: &short {max_steps: 1, prompts_per_step: 2, num_generations: 2,"
                    " max_new_tokens: 8, vllm: &engine {gpu_memory_utilization: 0.3}}}\n"
                    "  - {name: code_rl, train: {<<: *short, temperature: 0.7, vllm: *engine}}\n")
    stages = {s.name: s.train for s in load_recipe(path).rl_stages}
    assert stages["math_rl"].max_steps == stages["code_rl"].max_steps == 1
    assert stages["code_rl"].temperature == 0.7 and stages["code_rl"].vllm == {"gpu_memory_utilization": 0.3}
