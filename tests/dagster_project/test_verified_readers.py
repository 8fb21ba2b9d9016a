"""Every reader of a lineage record checks it (spec.lineage_verify): a hand-edited record or a
changed data file is never reused as fresh, `cascade status` shows the output stale with the
cause, a downstream step refuses it, `cascade verify-home` and `cascade audit` report it."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from dagster_project.cli import main
from spec.lineage import LINEAGE_FILE, make_record, read_record, write_record


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    return tmp_path / "home"


def edit_record(folder: Path, **changes) -> None:
    record = json.loads((folder / LINEAGE_FILE).read_text())
    (folder / LINEAGE_FILE).write_text(json.dumps(record | changes))


def write_table(rows: list[int], asset: str = "up"):
    from assets.store import CascadeStore

    return CascadeStore().write_dataset(pa.table({"x": rows}), asset, rows_in=len(rows), dropped={}, inputs=[],
                                        code_version="c", config={})


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".unverified-"))


def test_dataset_with_edited_record_is_written_again(home: Path) -> None:
    first = write_table([1, 2, 3])
    edit_record(first.folder, data_version="abc123")
    again = write_table([1, 2, 3])
    # not the edited record, reused as if it were fresh: the folder is set aside and written anew
    assert again.record["data_version"] == again.data_version == first.data_version
    assert read_record(again.folder)["data_version"] == first.data_version
    assert len(hidden(again.folder)) == 1


def test_dataset_with_changed_file_is_written_again(home: Path) -> None:
    first = write_table([1, 2, 3])
    (first.folder / "data.parquet").write_bytes(b"not the table")
    again = write_table([1, 2, 3])
    assert (again.folder / "data.parquet").read_bytes() != b"not the table" and len(hidden(again.folder)) == 1


def test_checkpoint_with_edited_record_is_not_complete(home: Path) -> None:
    from assets.checkpoints import _is_complete

    out = home / "checkpoints" / "math_rl" / "def456"
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"weights")
    write_record(out, make_record("math_rl", "def456", out, "c", []))
    assert _is_complete(out)
    edit_record(out, data_version="abc123")
    assert not _is_complete(out)
    assert not out.exists() and len(hidden(out)) == 1  # kept aside for inspection, trained again


def test_a_users_own_model_folder_is_recorded_again_when_it_changes(home: Path, tmp_path: Path) -> None:
    from assets.checkpoints import _finish
    from spec.hashing import stable_hash
    from spec.lineage import file_manifest
    from spec.lineage_verify import verify_record

    mine = tmp_path / "my_model"
    mine.mkdir()
    (mine / "model.safetensors").write_bytes(b"weights")
    for weights in (b"weights", b"new weights"):
        (mine / "model.safetensors").write_bytes(weights)
        version = stable_hash(file_manifest(mine), 32)  # what the base model asset versions it by
        _finish(home / "checkpoints", mine, version, "c", [], None, {})
        assert read_record(mine)["data_version"] == version and verify_record(mine) == []
    # a folder in the home is never re-signed here: only _is_complete / _seal vouch for it
    out = home / "checkpoints" / "sft" / "v1"
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"w")
    write_record(out, make_record("sft", "v1", out, "c", []))
    (out / "model.safetensors").write_bytes(b"x")
    _finish(home / "checkpoints", out, "v1", "c", [], "sft", {})
    assert verify_record(out) != []


def _defs() -> list[dg.AssetsDefinition]:
    from assets.common import dataset_metadata
    from assets.store import CascadeStore

    up_key, down_key = dg.AssetKey(["corpora", "up"]), dg.AssetKey(["corpora", "down"])

    @dg.asset(key=up_key)
    def up() -> dg.MaterializeResult:
        out = write_table([1, 2, 3])
        return dg.MaterializeResult(data_version=dg.DataVersion(out.data_version), metadata=dataset_metadata(out.record))

    @dg.asset(key=down_key, deps=[up_key])
    def down(context) -> dg.MaterializeResult:  # no annotation: this module's annotations are strings
        import pyarrow.parquet as pq

        rows = pq.read_table(CascadeStore().upstream_path(context, up_key) / "data.parquet")["x"].to_pylist()
        out = write_table([r * 2 for r in rows], "down")
        return dg.MaterializeResult(data_version=dg.DataVersion(out.data_version), metadata=dataset_metadata(out.record))

    return [up, down]


def test_status_shows_an_edited_output_stale_with_its_cause(home: Path) -> None:
    from dagster_project.commands import asset_statuses

    assets = _defs()
    defs = dg.Definitions(assets=assets)
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize(assets, instance=instance).success
    rows = {r["asset"]: r for r in asset_statuses(defs, instance)}
    assert not rows["up"]["stale"] and not rows["down"]["stale"] and rows["up"]["problems"] == []

    [folder] = (home / "data" / "up").iterdir()
    version = folder.name
    edit_record(folder, data_version="abc123")
    rows = {r["asset"]: r for r in asset_statuses(defs, instance)}
    cause = f"data/up: lineage.json says data_version abc123 but its folder is {version}"
    assert rows["up"]["stale"] and rows["up"]["problems"] == [cause] and rows["up"]["stale_causes"][0] == cause
    assert rows["down"]["stale"] and "corpora/up: its output does not verify" in rows["down"]["stale_causes"]

    # a downstream step refuses the unverified input rather than reading it
    result = dg.materialize(assets[1:], instance=instance, selection=[assets[1].key], raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert cause in failure.event_specific_data.error.message

    # rematerializing writes it again and everything is fresh
    assert dg.materialize(assets, instance=instance).success
    rows = {r["asset"]: r for r in asset_statuses(defs, instance)}
    assert not rows["up"]["stale"] and not rows["down"]["stale"]
    assert read_record(folder)["data_version"] == version and len(hidden(folder)) == 1


def test_status_flags_a_deleted_output(home: Path) -> None:
    import shutil

    from dagster_project.commands import asset_statuses

    assets = _defs()
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize(assets, instance=instance).success
    folder = next((home / "data" / "down").iterdir())
    shutil.rmtree(folder)
    rows = {r["asset"]: r for r in asset_statuses(dg.Definitions(assets=assets), instance)}
    assert rows["down"]["stale"] and rows["down"]["problems"] == [f"data/down: its output {folder} is gone"]


def test_verify_home_reports_every_mismatch_and_exits_1(home: Path, capsys) -> None:
    clean = write_table([1, 2, 3])
    assert main(["verify-home"]) == 0
    assert "1 records" in capsys.readouterr().out

    edited = write_table([4, 5], "edited")
    edit_record(edited.folder, data_version="abc123")
    resized = write_table([6], "resized")
    (resized.folder / "data.parquet").write_bytes(b"short")
    gone = write_table([7], "gone")
    (gone.folder / "data.parquet").unlink()
    capsys.readouterr()
    assert main(["verify-home"]) == 1
    out = capsys.readouterr().out
    assert f"MISMATCH data/edited: lineage.json says data_version abc123 but its folder is {edited.data_version}" in out
    assert "MISMATCH data/resized: data file data.parquet is 5 bytes but lineage.json says" in out
    assert "MISMATCH data/gone: data file data.parquet is missing (lineage.json lists it" in out
    assert "data/up" not in out

    assert main(["verify-home", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["failed"] == 3
    assert [r for r in report["records"] if r["folder"] == str(clean.folder)][0]["problems"] == []


def test_verify_home_lists_records_without_files_as_unsigned(home: Path, capsys) -> None:
    from spec.lineage import FILES_KEY

    out = write_table([1, 2, 3])
    record = read_record(out.folder)
    del record[FILES_KEY]  # as written before records listed their files
    (out.folder / LINEAGE_FILE).write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["verify-home"]) == 0
    assert f"unsigned {out.folder}" in capsys.readouterr().out
    assert main(["verify-home", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"][0]["unsigned"] is True


def test_audit_refuses_an_unverified_checkpoint(home: Path, capsys) -> None:
    import pyarrow.parquet as pq

    out = home / "checkpoints" / "math_rl" / "def456"
    out.mkdir(parents=True)
    (out / "model.safetensors").write_bytes(b"weights")
    pq.write_table(pa.table({"step": [0]}), out / "rollouts.parquet")
    write_record(out, make_record("math_rl", "def456", out, "c", []))
    pq.write_table(pa.table({"step": [1]}), out / "rollouts.parquet")  # changed after the record
    assert main(["audit", "math_rl"]) == 2
    err = capsys.readouterr().err
    assert "checkpoints/math_rl: data file rollouts.parquet has digest" in err
