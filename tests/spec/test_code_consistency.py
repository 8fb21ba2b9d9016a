"""Reward code is versioned by the code that runs (spec.hashing.object_source_version): a module
file edited after the module was imported raises instead of giving the running, older code the
new file's version; the recipe is parsed from the one read of its bytes."""

from __future__ import annotations

import importlib
import os
import sys
import uuid
from pathlib import Path

import pytest

from spec.consistent_read import FileChangedError
from spec.hashing import object_source_version, source_version

CODE = "class Scorer:\n    def score(self, text):\n        return {value}\n\n\ndef judge(text):\n    return {value}\n"


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    name = f"scorer_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text(CODE.format(value=1))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(name), path
    sys.modules.pop(name, None)


def _edit_keeping_stat(path: Path, text: str) -> None:
    """Rewrite the file in place with the same size and mtime: only its bytes tell."""
    stat = path.stat()
    assert len(text) == stat.st_size
    with open(path, "r+") as fh:
        fh.write(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_an_unchanged_module_is_versioned_by_its_file(module) -> None:
    mod, path = module
    assert object_source_version(mod.Scorer) == object_source_version(mod.judge) == source_version(str(path))


@pytest.mark.parametrize("attr", ["Scorer", "judge"])
def test_a_module_edited_after_import_is_not_versioned_by_the_new_file(module, attr: str) -> None:
    mod, path = module
    path.write_text(CODE.format(value=2))
    with pytest.raises(FileChangedError, match=r"changed after its module was imported .*rerun when it is stable"):
        object_source_version(getattr(mod, attr))


def test_an_edit_that_keeps_size_and_mtime_is_still_seen(module) -> None:
    mod, path = module
    object_source_version(mod.Scorer)  # versioned (and cached by stat) once, before the edit
    _edit_keeping_stat(path, CODE.format(value=3))
    # mtime and size alone would keep the cached digest of the old bytes; inode and ctime tell
    with pytest.raises(FileChangedError, match="changed after its module was imported"):
        object_source_version(mod.Scorer)


def test_the_recipe_is_parsed_from_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe file is read once: what is parsed is what was read (no second access to race)."""
    import spec.extends as extends

    path = tmp_path / "r.yaml"
    path.write_text("name: x\n")
    reads: list[Path] = []
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        reads.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: pytest.fail("a second, text read of the recipe"))
    assert extends.read_recipe_file(path) == {"name": "x"} and reads == [path]
