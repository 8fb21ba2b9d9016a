"""Records that verify themselves (spec.lineage_verify): a lineage.json edited by hand, or a data
file changed or deleted after it was written, is found and named with both values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spec import lineage_verify
from spec.lineage import FILES_KEY, LINEAGE_FILE, lineage_tree, make_record, read_record, render_tree, write_record
from spec.lineage_verify import annotate_tree, read_verified_record, set_aside, tree_problems, verify_record


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def make_output(home: Path, root: str, asset: str, version: str, files: dict[str, bytes],
                inputs: list[dict] | None = None, record_asset: str | None = None) -> Path:
    """An output folder in the home's layout with its record, written by the one writer."""
    folder = home / root / asset / version
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    path = folder / "data.parquet" if root == "data" else folder
    write_record(folder, make_record(record_asset or asset, version, path, "code-1", inputs or []))
    return folder


def edit_record(folder: Path, **changes) -> None:
    record = json.loads((folder / LINEAGE_FILE).read_text())
    (folder / LINEAGE_FILE).write_text(json.dumps(record | changes))


def test_write_record_lists_the_data_files(home: Path) -> None:
    folder = make_output(home, "checkpoints", "math_rl", "def456",
                         {"model.safetensors": b"w" * 64, "tok/vocab.json": b"{}", "README.md": b"card",
                          ".hidden": b"tmp"})
    files = read_record(folder)[FILES_KEY]
    # the record itself, the model card (rewritten after the record) and hidden files are not data
    assert set(files) == {"model.safetensors", "tok/vocab.json"}
    assert files["model.safetensors"]["size"] == 64 and len(files["model.safetensors"]["digest"]) == 32
    assert verify_record(folder) == []
    (folder / "README.md").write_text("the eval table changed")  # the model card may change later
    assert verify_record(folder) == []


def test_edited_data_version_is_named_with_both_values(home: Path) -> None:
    folder = make_output(home, "checkpoints", "math_rl", "def456", {"model.safetensors": b"w" * 64})
    edit_record(folder, data_version="abc123")
    assert verify_record(folder) == ["checkpoints/math_rl: lineage.json says data_version abc123 but its folder is def456"]
    record, problems = read_verified_record(folder)
    assert record["data_version"] == "abc123" and problems


def test_edited_asset_and_path(home: Path) -> None:
    folder = make_output(home, "data", "math_rl_prompts", "v1", {"data.parquet": b"rows"})
    other = make_output(home, "data", "code_rl_prompts", "v2", {"data.parquet": b"rows"})
    edit_record(folder, asset="code_rl_prompts", path=read_record(other)["path"])
    problems = verify_record(folder)
    assert "data/math_rl_prompts: lineage.json says asset code_rl_prompts but its folder is math_rl_prompts" in problems
    assert any("says path ${CASCADE_HOME}/data/code_rl_prompts/v2/data.parquet but it lies in" in p for p in problems)


def test_eval_records_are_named_eval_stage(home: Path) -> None:
    folder = make_output(home, "evals", "math_rl", "e1", {"eval.json": b"{}"}, record_asset="eval_math_rl")
    assert verify_record(folder) == []
    shard = make_output(home, "data", "clean_x_shards/3", "s1", {"data.parquet": b"rows"})
    assert verify_record(shard) == []


def test_data_file_changed_same_size(home: Path) -> None:
    folder = make_output(home, "data", "math_rl_prompts", "v1", {"data.parquet": b"0123456789"})
    before = read_record(folder)[FILES_KEY]["data.parquet"]["digest"]
    (folder / "data.parquet").write_bytes(b"0123456780")
    [problem] = verify_record(folder)
    assert problem.startswith("data/math_rl_prompts: data file data.parquet has digest ")
    assert problem.endswith(f"but lineage.json says {before}")


def test_data_file_changed_size(home: Path) -> None:
    folder = make_output(home, "data", "math_rl_prompts", "v1", {"data.parquet": b"0123456789"})
    (folder / "data.parquet").write_bytes(b"01234")
    assert verify_record(folder) == ["data/math_rl_prompts: data file data.parquet is 5 bytes but lineage.json says 10"]


def test_data_file_deleted_or_added(home: Path) -> None:
    folder = make_output(home, "checkpoints", "sft", "c1", {"model.safetensors": b"w" * 8, "config.json": b"{}"})
    (folder / "config.json").unlink()
    (folder / "extra.bin").write_bytes(b"new")
    problems = verify_record(folder)
    assert any(p.startswith("checkpoints/sft: data file config.json is missing (lineage.json lists it: 2 bytes")
               for p in problems)
    assert "checkpoints/sft: data file extra.bin is not listed in lineage.json (added after it was written)" in problems


def test_big_files_are_rehashed_only_in_full(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_output(home, "checkpoints", "sft", "c1", {"model.safetensors": b"w" * 100})
    (folder / "model.safetensors").write_bytes(b"v" * 100)
    monkeypatch.setattr(lineage_verify, "QUICK_DIGEST_BYTES", 10)
    assert verify_record(folder) == []  # a same-size edit of a big file: only the full check sees it
    [problem] = verify_record(folder, full=True)
    assert "data file model.safetensors has digest" in problem


def test_unreadable_or_missing_record(home: Path) -> None:
    folder = make_output(home, "data", "a", "v1", {"data.parquet": b"x"})
    (folder / LINEAGE_FILE).write_text("{not json")
    [problem] = verify_record(folder)
    assert problem.startswith("data/a: lineage.json cannot be read")
    (folder / LINEAGE_FILE).unlink()
    assert verify_record(folder) == [f"data/a: no lineage.json in {folder}"]


def test_records_without_files_are_checked_by_layout(home: Path) -> None:
    folder = make_output(home, "data", "a", "v1", {"data.parquet": b"x"})
    record = read_record(folder)
    del record[FILES_KEY]
    (folder / LINEAGE_FILE).write_text(json.dumps(record))
    (folder / "data.parquet").write_bytes(b"changed")
    assert verify_record(folder) == []
    edit_record(folder, data_version="v9")
    assert verify_record(folder) == ["data/a: lineage.json says data_version v9 but its folder is v1"]


def test_outside_the_home_only_files_are_checked(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "my_model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"w")
    write_record(folder, make_record("whatever", "digest-of-it", folder, None, []))
    assert verify_record(folder) == []
    (folder / "model.safetensors").write_bytes(b"v")
    [problem] = verify_record(folder)
    assert problem.startswith(f"{folder}: data file model.safetensors has digest")


def test_set_aside_keeps_the_folder_under_a_hidden_name(home: Path) -> None:
    folder = make_output(home, "checkpoints", "sft", "c1", {"model.safetensors": b"w"})
    moved = set_aside(folder)
    assert not folder.exists() and moved.parent == folder.parent and moved.name.startswith(".unverified-c1-")
    assert (moved / "model.safetensors").read_bytes() == b"w"


def test_lineage_tree_marks_unverified_nodes(home: Path) -> None:
    data = make_output(home, "data", "math_rl_prompts", "d1", {"data.parquet": b"rows"})
    ref = {"asset": "math_rl_prompts", "data_version": "d1", "path": str(data / "data.parquet")}
    ckpt = make_output(home, "checkpoints", "math_rl", "def456", {"model.safetensors": b"w"}, inputs=[ref])
    tree = annotate_tree(lineage_tree({"asset": "math_rl", "data_version": "def456", "path": str(ckpt)}))
    assert tree_problems(tree) == [] and "problems" not in tree
    edit_record(ckpt, data_version="abc123")
    (data / "data.parquet").write_bytes(b"ROWS")
    tree = annotate_tree(lineage_tree({"asset": "math_rl", "data_version": "def456", "path": str(ckpt)}))
    assert "math_rl: referenced as data_version def456 but its lineage.json says abc123" in tree["problems"]
    assert "checkpoints/math_rl: lineage.json says data_version abc123 but its folder is def456" in tree["problems"]
    assert any(p.startswith("data/math_rl_prompts: data file data.parquet has digest")
               for p in tree["inputs"][0]["problems"])
    text = "\n".join(render_tree(tree))
    assert text.splitlines()[0].endswith("UNVERIFIED")
    assert "!! checkpoints/math_rl: lineage.json says data_version abc123 but its folder is def456" in text
    assert "!! data/math_rl_prompts: data file data.parquet has digest" in text


def test_a_gone_output_is_marked(home: Path) -> None:
    tree = annotate_tree({"asset": "sft", "data_version": "c1", "path": str(home / "checkpoints" / "sft" / "c1"),
                          "code_version": None, "inputs": []})
    assert tree["problems"] == [f"checkpoints/sft: its output {home / 'checkpoints' / 'sft' / 'c1'} is gone"]
