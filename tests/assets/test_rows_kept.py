"""The blocking `rows_kept` check (assets.checks) run on asset bodies with a fake store: a source
that keeps no row (an empty file; a ShareGPT file declared `openai`) fails it, naming the top
quarantine reasons; `min_rows` sets the bar; the curated table's check names the raw read's
quarantine too; every raw source, curated table and corpus has the check."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from assets.common import CORPORA, CURATED, SOURCES, WorkTimer, key
from spec.recipe import Recipe
from tests.assets.fakes import FakeStore, asset_context, check_context


def _sharegpt(i: int) -> dict:
    return {"conversations": [{"from": "human", "value": f"Is fruit {i} sweet?"}, {"from": "gpt", "value": "Yes."}]}


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    from dagster_project.recipe import parse_recipe

    (tmp_path / "sg.jsonl").write_text("".join(json.dumps(_sharegpt(i)) + "\n" for i in range(6)))
    (tmp_path / "empty.jsonl").write_text("{}\n")  # an empty file fails at load (spec.recipe_checks): emptied below
    recipe = parse_recipe({
        "name": "rows_kept", "model": {"base": "tiny"},
        "sources": [{"name": "sg_as_openai", "domain": "chat", "path": str(tmp_path / "sg.jsonl"), "format": "openai"},
                    {"name": "sg", "domain": "chat", "path": str(tmp_path / "sg.jsonl"), "min_rows": 7},
                    {"name": "empty", "domain": "chat", "path": str(tmp_path / "empty.jsonl")},
                    {"name": "allowed", "domain": "chat", "path": str(tmp_path / "empty.jsonl"), "min_rows": 0}],
        "benchmarks": [{"name": "gsm8k", "builtin": "gsm8k"}],
        "sft_stages": [{"name": "sft", "sources": ["sg"], "train": {"max_steps": 1}}],
    })
    (tmp_path / "empty.jsonl").write_text("")  # emptied after load: the check still stops it
    return recipe


def _check(recipe: Recipe, asset_key: dg.AssetKey) -> dg.AssetChecksDefinition:
    from assets.checks import build_data_checks

    return next(c for c in build_data_checks(recipe, WorkTimer())
                for spec in c.check_specs if spec.asset_key == asset_key and spec.name == "rows_kept")


def _raw(recipe: Recipe, store: FakeStore, name: str) -> FakeStore:
    from assets.sources import build_source_assets

    raw_key = key(SOURCES, f"raw_{name}")
    body = next(d for d in build_source_assets(recipe, WorkTimer()) if isinstance(d, dg.AssetsDefinition) and d.key == raw_key)
    return store.with_output(raw_key, body(asset_context(store)))


def test_every_raw_source_curated_table_and_corpus_has_the_check(recipe: Recipe) -> None:
    from assets.checks import build_data_checks

    checked = {spec.asset_key for c in build_data_checks(recipe, WorkTimer()) for spec in c.check_specs
               if spec.name == "rows_kept"}
    names = [s.name for s in recipe.sources]
    assert checked == {*(key(SOURCES, f"raw_{n}") for n in names), *(key(CURATED, f"clean_{n}") for n in names),
                       key(CORPORA, "sft_data")}
    assert all(spec.blocking for c in build_data_checks(recipe, WorkTimer()) for spec in c.check_specs)


def test_a_sharegpt_file_declared_openai_fails_naming_the_reason(recipe: Recipe, tmp_path: Path) -> None:
    store = _raw(recipe, FakeStore(home=str(tmp_path / "home")), "sg_as_openai")
    result = _check(recipe, key(SOURCES, "raw_sg_as_openai"))(check_context(store))
    assert not result.passed
    assert result.description == ("sources/raw_sg_as_openai: 0 of 6 rows kept, fewer than min_rows=1; "
                                  "top reasons: missing_field:messages ×6")
    assert result.metadata["top_reasons"].value == ["missing_field:messages ×6"]


def test_an_empty_file_fails_and_min_rows_sets_the_bar(recipe: Recipe, tmp_path: Path) -> None:
    store = FakeStore(home=str(tmp_path / "home"))
    for name in ("empty", "allowed", "sg"):
        store = _raw(recipe, store, name)
    empty = _check(recipe, key(SOURCES, "raw_empty"))(check_context(store))
    assert not empty.passed and empty.description.endswith("0 of 0 rows kept, fewer than min_rows=1; "
                                                           "top reasons: the file has no rows")
    assert _check(recipe, key(SOURCES, "raw_allowed"))(check_context(store)).passed  # min_rows: 0
    six = _check(recipe, key(SOURCES, "raw_sg"))(check_context(store))  # 6 rows kept, min_rows 7
    assert not six.passed and "6 of 6 rows kept, fewer than min_rows=7" in six.description


def test_the_curated_tables_check_names_the_raw_quarantine(recipe: Recipe, tmp_path: Path) -> None:
    from assets.checks import rows_kept_result

    raw = {"asset": "raw_s", "inputs": [{"asset": "file_s"}], "rows_in": 5, "rows_out": 1, "dropped": {"missing_field:messages": 4, "contaminated:x": 1}}
    clean = {"asset": "clean_s", "rows_in": 1, "rows_out": 0, "dropped": {"exact_duplicate": 1}}
    result = rows_kept_result("curated/clean_s", clean, [raw, {"asset": "bench_x"}], 1)
    assert not result.passed
    assert result.description.endswith("top reasons: missing_field:messages ×4, exact_duplicate ×1")
    assert rows_kept_result("curated/clean_s", {**clean, "rows_out": 1}, [raw], 1).passed
