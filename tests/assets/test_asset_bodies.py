"""Asset bodies run with a fake store (tests/assets/fakes.py) and no Dagster instance: each is
called directly, its upstream outputs handed over by name, its output found under the fake home.

Sources, corpora, data checks and evals each take their inputs from the store and write under
its home; `$CASCADE_HOME` points elsewhere and stays empty of outputs, and the store's event-log
read is made to fail the test if anything reaches it.
"""

import json
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from assets.common import BENCHMARKS, CHECKPOINTS, CORPORA, CURATED, EVALS, SOURCES, WorkTimer, key
from spec.lineage import make_record, read_record, write_record
from spec.recipe import Recipe
from tests.assets.fakes import FakeStore, asset_context, check_context

RAW, BENCH = key(SOURCES, "raw_arith"), key(BENCHMARKS, "bench_eval_arith")
CLEAN, PROMPTS = key(CURATED, "clean_arith"), key(CORPORA, "math_rl_prompts")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeStore:
    """A fake store in `tmp/home`; `$CASCADE_HOME` is another folder, and the event log is off limits."""
    import assets.store

    def no_event_log(*args: object, **kwargs: object) -> None:
        raise AssertionError("an asset body read Dagster's event log instead of its store")

    monkeypatch.setattr(assets.store, "latest_metadata", no_event_log)
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "env_home"))
    return FakeStore(home=str(tmp_path / "home"))


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    from dagster_project.recipe import parse_recipe

    samples = tmp_path / "samples"  # written by the source assets (`generate:`) on first use
    return parse_recipe({
        "name": "store_test", "model": {"base": "tiny"},
        "sources": [{"name": "arith", "domain": "math", "path": f"{samples}/arith.jsonl", "generate": "math_rl",
                     "limit": 8}],
        "benchmarks": [{"name": "eval_arith", "path": f"{samples}/eval_arith.jsonl", "generate": "math_eval",
                        "domain": "math", "eval_domain": "math", "eval_limit": 2}],
        "rl_stages": [{"name": "math_rl", "kind": "math", "sources": ["arith"],
                       "train": {"max_steps": 1, "prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 4}}],
        "evals": {"max_new_tokens": 4, "modes": ["no_think"]},
    })


def _by_key(defs: list, asset_key: dg.AssetKey) -> dg.AssetsDefinition:
    return next(d for d in defs if isinstance(d, dg.AssetsDefinition) and d.key == asset_key)


def _folder(result: dg.MaterializeResult) -> Path:
    return Path(str(result.metadata["path"].value))


def _sources(recipe: Recipe, store: FakeStore) -> tuple[dg.MaterializeResult, dg.MaterializeResult]:
    from assets.sources import build_source_assets

    defs = build_source_assets(recipe, WorkTimer())
    return _by_key(defs, RAW)(asset_context(store)), _by_key(defs, BENCH)(asset_context(store))


def _clean(recipe: Recipe, store: FakeStore) -> tuple[FakeStore, dg.MaterializeResult]:
    """The source assets, then clean_arith fed their outputs; the store now knows all three."""
    from assets.corpora import build_corpus_assets

    raw, bench = _sources(recipe, store)
    store = store.with_output(RAW, raw).with_output(BENCH, bench)
    clean = _by_key(build_corpus_assets(recipe, WorkTimer()), CLEAN)(asset_context(store))
    return store.with_output(CLEAN, clean), clean


def test_source_assets_write_under_the_store_home(recipe: Recipe, store: FakeStore, tmp_path: Path) -> None:
    raw, bench = _sources(recipe, store)
    for result, name in [(raw, "raw_arith"), (bench, "bench_eval_arith")]:
        folder = _folder(result)
        assert folder.parent == store.data_root() / name and folder.name == result.metadata["data_version"]
        assert read_record(folder)["data_version"] == result.data_version.value
    assert raw.metadata["rows_out"] == pq.read_table(_folder(raw) / "data.parquet").num_rows > 0
    assert (_folder(raw) / "quarantine.parquet").is_file()
    assert not (tmp_path / "env_home" / "data").exists()  # nothing written where $CASCADE_HOME points


def test_curated_and_corpus_assets_read_their_inputs_from_the_store(recipe: Recipe, store: FakeStore) -> None:
    from assets.corpora import build_corpus_assets

    store, clean = _clean(recipe, store)
    folder = _folder(clean)
    assert folder.parent == store.data_root() / "clean_arith"
    # the lineage inputs are the refs the store handed over, in the asset's order
    assert read_record(folder)["inputs"] == [
        {"asset": k.path[-1], **store.outputs[k.to_user_string()]} for k in (RAW, BENCH)]

    prompts = _by_key(build_corpus_assets(recipe, WorkTimer()), PROMPTS)(asset_context(store))
    assert _folder(prompts).parent == store.data_root() / "math_rl_prompts" and prompts.metadata["rows_out"] > 0
    assert [i["asset"] for i in read_record(_folder(prompts))["inputs"]] == ["clean_arith"]

    # an upstream the store has no output for fails the body, as an unmaterialized one does
    with pytest.raises(dg.Failure, match="upstream asset sources/raw_arith has not been materialized"):
        _by_key(build_corpus_assets(recipe, WorkTimer()), CLEAN)(asset_context(FakeStore(home=store.home)))


def test_an_upstream_whose_record_does_not_verify_fails_the_body(recipe: Recipe, store: FakeStore) -> None:
    from assets.corpora import build_corpus_assets

    raw, bench = _sources(recipe, store)
    (_folder(raw) / "data.parquet").write_bytes(b"not the rows")
    store = store.with_output(RAW, raw).with_output(BENCH, bench)
    with pytest.raises(dg.Failure, match=r"upstream asset sources/raw_arith is unusable .*data file data.parquet"):
        _by_key(build_corpus_assets(recipe, WorkTimer()), CLEAN)(asset_context(store))


def test_data_checks_read_the_checked_table_from_the_store(recipe: Recipe, store: FakeStore) -> None:
    from assets.checks import build_data_checks

    store, clean = _clean(recipe, store)
    checks = {spec.name: c for c in build_data_checks(recipe, WorkTimer())
              for spec in c.check_specs if spec.asset_key == CLEAN}
    assert set(checks) == {"no_benchmark_overlap", "row_accounting", "schema", "rows_kept"}
    results = {name: check(check_context(store)) for name, check in checks.items()}
    assert all(r.passed for r in results.values())
    assert results["row_accounting"].metadata["rows_out"].value == clean.metadata["rows_out"]

    pq.write_table(pq.read_table(_folder(clean) / "data.parquet").slice(0, 1), _folder(clean) / "data.parquet")
    with pytest.raises(dg.Failure, match="curated/clean_arith is unusable"):  # the store verified it first
        checks["row_accounting"](check_context(store))


def _checkpoint(store: FakeStore, stage: str, files: dict[str, Path | bytes]) -> dict[str, str]:
    """A recorded checkpoint folder under the store's home: the `outputs` entry for it."""
    folder = store.checkpoint_root() / stage / "v1"
    folder.mkdir(parents=True)
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copy(content, folder / name)
        else:
            (folder / name).write_bytes(content)
    write_record(folder, make_record(stage, "v1", folder, "c", []))
    return {"path": str(folder), "data_version": "v1"}


def test_eval_assets_read_checkpoints_and_write_under_the_store_home(recipe: Recipe, store: FakeStore,
                                                                     tiny_model_dir: Path) -> None:
    from assets.evals import build_eval_assets
    from assets.sources import build_source_assets

    bench = _by_key(build_source_assets(recipe, WorkTimer()), BENCH)(asset_context(store))
    base = _checkpoint(store, "base_model", {p.name: p for p in tiny_model_dir.iterdir() if p.is_file()})
    store = store.with_output(BENCH, bench).with_output(key(CHECKPOINTS, "base_model"), base)
    assets, _ = build_eval_assets(recipe, WorkTimer())

    evaluated = _by_key(assets, key(EVALS, "eval_base_model"))(asset_context(store))
    folder = _folder(evaluated)
    assert folder == store.eval_root() / "base_model" / evaluated.metadata["data_version"]
    assert json.loads((folder / "eval.json").read_text())["math"]["no_think"]["n"] == 2
    assert [(i["asset"], i["data_version"]) for i in read_record(folder)["inputs"]] == [
        ("base_model", "v1"), ("bench_eval_arith", bench.metadata["data_version"])]

    # the matrix reads the evals the store has (math_rl's is missing: shown as missing, not an error)
    store = store.with_output(key(EVALS, "eval_base_model"), evaluated)
    matrix = _by_key(assets, key(EVALS, "forgetting_matrix"))(asset_context(store))
    out = _folder(matrix)
    assert out.parent == store.eval_root() / "forgetting_matrix"
    report = json.loads((out / "report.json").read_text())
    assert report["matrix"]["base_model"]["math"]["n"] == 2 and report["matrix"]["math_rl"]["math"] is None
    assert read_record(out)["inputs"] == [{"asset": "eval_base_model", **store.outputs["evals/eval_base_model"]}]


def test_training_signal_check_reads_the_checkpoint_metrics_from_the_store(recipe: Recipe, store: FakeStore) -> None:
    import io

    import pyarrow as pa

    from assets.evals import build_eval_assets

    buf = io.BytesIO()
    pq.write_table(pa.table({"step": [0, 1], "loss": [1.0, 1.0], "grad_norm": [0.0, 0.0]}), buf)
    store = store.with_output(key(CHECKPOINTS, "math_rl"), _checkpoint(store, "math_rl", {"metrics.parquet": buf.getvalue()}))
    _, checks = build_eval_assets(recipe, WorkTimer())
    check = next(c for c in checks if any(s.name == "training_signal" for s in c.check_specs))
    result = check(check_context(store))
    assert not result.passed and result.metadata["steps"].value == 2
    assert any("grad" in p for p in result.metadata["problems"].value)
