"""The generation asset body with a fake store (tests/assets/fakes.py) and no Dagster instance:
its input rows come from the store, its built-in teacher is resolved and built under the store's
home (trainer.models.model_folder), its samples go to the generation cache under that home
(generation.runner) and its scores to the reward cache there, its output is written there;
`$CASCADE_HOME` stays empty. A rerun generates nothing and writes the same version."""

import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from assets.common import CURATED, SOURCES, WorkTimer, key
from generation.cache import DB_FILE
from generation.engine import ENGINES
from spec.lineage import read_record
from spec.recipe import Recipe
from tests.assets.fakes import FakeStore, asset_context

RAW, CLEAN = key(SOURCES, "raw_arith"), key(CURATED, "clean_arith")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> FakeStore:
    """A fake store in `tmp/home`; `$CASCADE_HOME` elsewhere; the event log off limits; the `hf`
    engine a fake that solves sums; `tiny` copied from the session's model instead of built."""
    import assets.store
    import trainer.models

    def no_event_log(*args: object, **kwargs: object) -> None:
        raise AssertionError("an asset body read Dagster's event log instead of its store")

    def tiny(path: Path, seed: int = 0) -> Path:
        shutil.copytree(tiny_model_dir, path, dirs_exist_ok=True)
        return Path(path)

    monkeypatch.setattr(assets.store, "latest_metadata", no_event_log)
    monkeypatch.setattr(trainer.models, "make_tiny_model", tiny)
    monkeypatch.setitem(ENGINES, "hf", "tests.generation.fake_engine:ArithmeticEngine")
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "env_home"))
    return FakeStore(home=str(tmp_path / "home"))


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    from dagster_project.recipe import parse_recipe

    return parse_recipe({
        "name": "generation_body", "model": {"base": "tiny"},
        "sources": [{"name": "arith", "domain": "math", "path": f"{tmp_path}/samples/arith.jsonl",
                     "generate": "math_sft", "limit": 6}],
        "generations": [{"name": "teach", "input": "arith", "use": "rejection", "model": "tiny", "verify": "math",
                         "samples": 2, "modes": ["think"], "limit": 3, "threshold": 0.0}],
        "sft_stages": [{"name": "sft", "sources": ["arith", "teach"], "train": {"max_steps": 1}}],
    })


def _asset(defs: list, asset_key: dg.AssetKey) -> dg.AssetsDefinition:
    return next(d for d in defs if isinstance(d, dg.AssetsDefinition) and d.key == asset_key)


def test_generation_body_reads_resolves_and_writes_through_the_store(recipe: Recipe, store: FakeStore,
                                                                      tmp_path: Path) -> None:
    from assets.generations import build_generation_assets, generation_key
    from assets.sources import build_source_assets

    raw = _asset(build_source_assets(recipe, WorkTimer()), RAW)(asset_context(store))
    rows = pq.read_table(Path(str(raw.metadata["path"].value)) / "data.parquet")
    clean = store.write_dataset(rows, "clean_arith", rows_in=rows.num_rows, dropped={}, inputs=[], code_version="c",
                                config={})
    store = store.with_output(CLEAN, {"path": str(clean.folder), "data_version": clean.data_version})
    generation = _asset(build_generation_assets(recipe, WorkTimer()), generation_key("teach"))

    first = generation(asset_context(store))
    folder = Path(str(first.metadata["path"].value))
    assert folder.parent == store.data_root() / "teach"
    assert first.metadata["generated"] == 6 and first.metadata["cached"] == 0  # 3 rows x 1 mode x 2 samples
    inputs = read_record(folder)["inputs"]
    assert [i["asset"] for i in inputs] == ["clean_arith", "model/tiny", "reward/math"]
    assert inputs[0]["data_version"] == clean.data_version
    assert Path(inputs[1]["path"]) == store.root() / "models" / "tiny"  # the teacher, built under the store's home
    assert (store.root() / "generation_cache" / DB_FILE).is_file() and (store.root() / "reward_cache.sqlite").is_file()
    assert not (tmp_path / "env_home").exists()  # nothing written where $CASCADE_HOME points

    again = generation(asset_context(store))
    assert again.metadata["generated"] == 0 and again.metadata["cached"] == 6
    assert again.data_version == first.data_version
