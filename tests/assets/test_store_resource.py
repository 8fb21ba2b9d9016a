"""The real store (assets.store.CascadeStore): where its home is, how it reads an upstream output
from Dagster's event log, and that every recipe's Definitions provide it."""

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from assets.store import STORE, CascadeStore


def test_home_is_the_environment_at_call_time_unless_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CascadeStore()
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "a"))
    assert store.root() == tmp_path / "a" and store.data_root() == tmp_path / "a" / "data"
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "b"))  # a step process's own environment
    assert store.checkpoint_root() == tmp_path / "b" / "checkpoints" and store.eval_root() == tmp_path / "b" / "evals"
    assert CascadeStore(home=str(tmp_path / "c")).data_root() == tmp_path / "c" / "data"


def _pair() -> list[dg.AssetsDefinition]:
    up_key = dg.AssetKey(["corpora", "up"])

    @dg.asset(key=up_key)
    def up(store: CascadeStore) -> dg.MaterializeResult:
        from assets.common import dataset_metadata

        out = store.write_dataset(pa.table({"x": [1, 2]}), "up", rows_in=2, dropped={}, inputs=[],
                                  code_version="c", config={})
        return dg.MaterializeResult(data_version=dg.DataVersion(out.data_version), metadata=dataset_metadata(out.record))

    @dg.asset(deps=[up_key])
    def down(context: dg.AssetExecutionContext, store: CascadeStore) -> dg.MaterializeResult:
        ref = store.upstream_ref(context, up_key)
        assert store.upstream_path(context, up_key) == Path(ref["path"])
        return dg.MaterializeResult(metadata={"ref": dg.MetadataValue.json(ref),
                                              "stored": store.upstream_metadata(context, up_key)["rows_out"]})

    return [up, down]


def test_upstream_ref_comes_from_the_event_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    result = dg.materialize(_pair(), instance=dg.DagsterInstance.ephemeral(), resources={STORE: CascadeStore()})
    assert result.success
    [written] = (tmp_path / "home" / "data" / "up").iterdir()
    meta = result.asset_materializations_for_node("down")[0].metadata
    assert meta["ref"].value == {"asset": "up", "data_version": written.name, "path": str(written)}
    assert meta["stored"].value == 2


def test_a_stored_home_path_resolves_against_the_store_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata names outputs relative to the home (`${CASCADE_HOME}/data/...`): a store with its own
    home reads them there (a copied home, say), not under `$CASCADE_HOME`."""
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    instance = dg.DagsterInstance.ephemeral()
    up, down = _pair()
    assert dg.materialize([up], instance=instance, resources={STORE: CascadeStore()}).success
    (tmp_path / "home").rename(tmp_path / "copy")
    result = dg.materialize([down], instance=instance, resources={STORE: CascadeStore(home=str(tmp_path / "copy"))})
    [written] = (tmp_path / "copy" / "data" / "up").iterdir()
    assert result.asset_materializations_for_node("down")[0].metadata["ref"].value["path"] == str(written)


@pytest.mark.parametrize("name", ["tiny", "default", "cascade2"])
def test_every_recipe_definitions_provide_the_store(name: str) -> None:
    from assets import build_definitions
    from dagster_project.recipe import load_recipe
    from spec.paths import REPO_ROOT

    defs = build_definitions(load_recipe(REPO_ROOT / "recipes" / f"{name}.yaml"))
    assert isinstance(defs.resources[STORE], CascadeStore)
    defs.resolve_all_job_defs()  # raises when an asset, check or op needs a resource nobody provides
