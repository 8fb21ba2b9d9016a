"""The one model resolver (trainer.models.model_folder) the generation assets and `cascade
generate` share: each form of name (built-in, folder, `${CASCADE_HOME}/...`, relative folder),
the version it reports (a checkpoint's recorded data version, else a digest of the files), and
clear errors; and the built-in table (spec.models) it and the recipe validator read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import trainer.models
from spec.entry_points import import_target
from spec.hashing import file_digest
from spec.lineage import make_record, write_record
from spec.models import BUILTIN_MODELS
from trainer.models import make_builtin, model_folder


@pytest.fixture
def fake_makers(monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path) -> list[tuple]:
    """Built-in makers that record their calls and hand back the session's tiny model."""
    calls: list[tuple] = []

    def tiny(path, seed=0):
        calls.append(("tiny", Path(path), seed))
        return tiny_model_dir

    def smollm2(dest=None):
        calls.append(("smollm2", Path(dest)))
        return tiny_model_dir

    monkeypatch.setattr(trainer.models, "make_tiny_model", tiny)
    monkeypatch.setattr(trainer.models, "ensure_base_model", smollm2)
    return calls


def test_builtin_table_points_at_real_makers() -> None:
    assert list(BUILTIN_MODELS) == ["smollm2", "tiny"]
    assert BUILTIN_MODELS["smollm2"].hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert BUILTIN_MODELS["tiny"].hub_id is None
    for model in BUILTIN_MODELS.values():
        assert callable(import_target(model.make)) and model.folder


def test_builtin_names_build_under_the_home(fake_makers: list, tmp_path: Path, tiny_model_dir: Path) -> None:
    home = tmp_path / "home"
    path, version = model_folder("tiny", home=home)
    assert fake_makers == [("tiny", home / "models" / "tiny", 0)]
    assert path == tiny_model_dir and version == file_digest(tiny_model_dir)
    model_folder("smollm2", home=home)
    assert fake_makers[-1] == ("smollm2", home / "models" / "smollm2-135m-instruct")


def test_make_builtin_passes_the_seed_only_to_seeded_models(fake_makers: list, tmp_path: Path) -> None:
    make_builtin("tiny", tmp_path / "a", seed=7)
    make_builtin("smollm2", tmp_path / "b", seed=7)
    assert fake_makers == [("tiny", tmp_path / "a", 7), ("smollm2", tmp_path / "b")]


def test_folder_forms_resolve_to_the_same_folder(tmp_path: Path, tiny_model_dir: Path) -> None:
    home = tmp_path / "home"
    model = home / "checkpoints" / "sft" / "v1"
    shutil.copytree(tiny_model_dir, model)
    digest = file_digest(model)
    assert model_folder(str(model)) == (model.resolve(), digest)
    assert model_folder("${CASCADE_HOME}/checkpoints/sft/v1", home=home) == (model.resolve(), digest)
    assert model_folder("checkpoints/sft/v1", relative_to=home) == (model.resolve(), digest)


def test_a_checkpoint_folder_is_versioned_by_its_record(tmp_path: Path, tiny_model_dir: Path) -> None:
    home = tmp_path / "home"
    model = home / "checkpoints" / "sft" / "v1"
    shutil.copytree(tiny_model_dir, model)
    write_record(model, make_record("sft", "abc123", model, "code", []))
    assert model_folder("${CASCADE_HOME}/checkpoints/sft/v1", home=home).version == "abc123"


def test_bad_names_say_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'no-such-model': expected a built-in model \(smollm2, tiny\) or a model folder"):
        model_folder("no-such-model")
    with pytest.raises(ValueError, match="is not a folder"):
        model_folder("${CASCADE_HOME}/checkpoints/gone", home=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no config.json"):
        model_folder(str(tmp_path / "empty"))
