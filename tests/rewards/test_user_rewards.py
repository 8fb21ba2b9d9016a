"""Your own reward by import path or file: options, failures as recorded scores, versions that
follow the source (the user's module and, for built-ins, the repo modules they import)."""

from __future__ import annotations

import json
import os
import textwrap
import uuid
from pathlib import Path

import pytest

from rewards.function import FunctionReward
from rewards.registry import (
    CATALOG,
    UnknownRewardError,
    build_reward,
    get_reward,
    reward_code_versions,
    reward_versions,
    validate_options,
)
from spec import hashing
from spec.hashing import source_files, source_version
from spec.paths import REPO_ROOT

SOURCE = '''
def brevity(prompts, completions, *, limit: int = 5, **columns):
    """1 for a completion of at most `limit` characters."""
    return [1.0 if len(c) <= limit else 0.0 for c in completions]


def echo_answer(prompts, completions, answer):
    """Named columns only: 1 when the completion is the row's answer."""
    return [float(c == a) for c, a in zip(completions, answer)]


def boom(prompts, completions, **columns):
    raise RuntimeError("verifier exploded")


def short(prompts, completions, **columns):
    return [1.0]


def scalar(prompts, completions, **columns):
    return 1.0


def odd(prompts, completions, **columns):
    return [None, "high", float("nan"), True]
'''


def _write(path: Path, text: str) -> None:
    """Write `text` and move the mtime forward, so an edit is never within the clock's tick."""
    old = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(textwrap.dedent(text))
    if old:
        os.utime(path, ns=(old + 10**9, old + 10**9))


@pytest.fixture
def user_module(tmp_path, monkeypatch) -> tuple[str, Path]:
    """A fresh, uniquely named module on sys.path (no clash with earlier tests' imports)."""
    name = f"user_rewards_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    _write(path, SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, path


def test_function_by_import_path_and_by_file(user_module, tmp_path, monkeypatch):
    name, path = user_module
    by_module = get_reward(f"{name}:brevity")
    assert isinstance(by_module, FunctionReward) and by_module.name == f"{name}:brevity"
    assert by_module([None, None], ["abc", "abcdefgh"]) == [1.0, 0.0]
    by_file = get_reward(f"{path}:brevity", limit=3)  # absolute path
    assert by_file([None, None], ["abc", "abcd"]) == [1.0, 0.0]
    monkeypatch.chdir(tmp_path)  # a relative path resolves against the working directory
    relative = get_reward(f"./{path.name}:echo_answer")
    assert [r.reason for r in relative.score([None] * 2, ["7", "8"], answer=["7", "7"], other=[1, 2])] == ["scored"] * 2
    assert relative([None], ["7"], answer=["7"], other=[0]) == [1.0]  # `other` is not passed to it
    with pytest.raises(UnknownRewardError, match="no_such_fn"):
        get_reward(f"{path}:no_such_fn")
    with pytest.raises(UnknownRewardError, match="cannot load"):
        get_reward(f"{tmp_path / 'missing.py'}:fn")


def test_options_are_keyword_only_parameters(user_module):
    name, _ = user_module
    validate_options(f"{name}:brevity", {"limit": 3})
    with pytest.raises(ValueError, match="lmit"):
        validate_options(f"{name}:brevity", {"lmit": 3})
    with pytest.raises(ValueError, match="limit"):
        validate_options(f"{name}:brevity", {"limit": "many"})
    with pytest.raises(ValueError, match="answer"):  # a column is not an option
        validate_options(f"{name}:echo_answer", {"answer": "3"})
    assert get_reward(f"{name}:brevity", limit=10)([None], ["abcdefgh"]) == [1.0]
    versions = {get_reward(f"{name}:brevity", **o).version for o in ({}, {"limit": 3}, {"limit": 4})}
    assert len(versions) == 3


def test_failures_are_recorded_scores_with_reasons(user_module):
    name, _ = user_module
    [boom] = get_reward(f"{name}:boom").score([None], ["x"])
    assert (boom.score, boom.reason, boom.infra_error) == (0.0, "reward_error", True)
    assert "verifier exploded" in boom.detail
    for fn in ("short", "scalar"):
        results = get_reward(f"{name}:{fn}").score([None] * 2, ["a", "b"])
        assert [(r.score, r.reason, r.infra_error) for r in results] == [(0.0, "wrong_length", True)] * 2
    results = get_reward(f"{name}:odd").score([None] * 4, ["a", "b", "c", "d"])
    assert [(r.score, r.reason) for r in results] == [
        (None, "not_applicable"), (0.0, "bad_score"), (0.0, "bad_score"), (1.0, "scored")]
    assert get_reward(f"{name}:odd")([None] * 4, ["a", "b", "c", "d"]) == [None, 0.0, 0.0, 1.0]


def test_version_is_the_source_digest_and_follows_edits(user_module, tmp_path):
    name, path = user_module
    target = f"{name}:brevity"
    before = get_reward(target).version  # the module is now imported (and cached by Python)
    assert before == source_version(target) == reward_code_versions([target])[target]
    assert reward_versions([target])[target] == before
    assert source_version(f"{path}:brevity") == before  # same file, by path
    _write(path, SOURCE + "\n# a comment changes the source\n")
    after = get_reward(target).version
    assert after != before and after == source_version(target) == reward_code_versions([target])[target]
    # a sibling it imports is part of its code; one it does not import is not
    _write(tmp_path / "helper_lib.py", "SCALE = 1.0\n")
    _write(tmp_path / "unrelated.py", "X = 1\n")
    _write(path, SOURCE + "\nimport helper_lib\n")
    with_helper = source_version(target)
    assert tmp_path / "helper_lib.py" in source_files(target) and tmp_path / "unrelated.py" not in source_files(target)
    _write(tmp_path / "helper_lib.py", "SCALE = 2.0  # edited\n")
    assert source_version(target) != with_helper
    unchanged = source_version(target)
    _write(tmp_path / "unrelated.py", "X = 22\n")
    assert source_version(target) == unchanged


def test_a_kept_reward_is_rebuilt_when_its_code_changes(user_module):
    """build_reward keeps its instance for the stage that scores with it, but never past an edit."""
    from spec.train import RewardSpec

    name, path = user_module
    spec = RewardSpec.model_validate({"name": f"{name}:brevity", "options": {"limit": 3}},
                                     context={"reward_catalog": CATALOG})
    kept = build_reward(spec)
    assert build_reward(spec) is kept and kept.version == reward_versions([spec])[spec.name]
    _write(path, SOURCE + "\n# edited\n")
    fresh = build_reward(spec, keep=False)
    assert fresh is not kept and fresh.version != kept.version and fresh([None], ["abcd"]) == [0.0]


def test_file_reward_reloads_after_an_edit(tmp_path):
    path = tmp_path / f"edited_{uuid.uuid4().hex[:8]}.py"
    _write(path, "def fn(prompts, completions, **columns):\n    return [0.0 for _ in completions]\n")
    first = get_reward(f"{path}:fn")
    _write(path, "def fn(prompts, completions, **columns):\n    return [1.0 for _ in completions]  # v2\n")
    second = get_reward(f"{path}:fn")
    assert first([None], ["x"]) == [0.0] and second([None], ["x"]) == [1.0]
    assert first.version != second.version == source_version(f"{path}:fn")


def test_a_package_is_versioned_by_all_its_files(tmp_path, monkeypatch):
    pkg = tmp_path / f"pkg_{uuid.uuid4().hex[:8]}"
    (pkg / "sub").mkdir(parents=True)
    _write(pkg / "__init__.py", "")
    _write(pkg / "sub" / "__init__.py", "")
    _write(pkg / "sub" / "score.py", "def fn(prompts, completions, **columns):\n    return [1.0] * len(completions)\n")
    _write(pkg / "words.txt", "alpha\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    target = f"{pkg.name}.sub.score:fn"
    before = source_version(target)
    assert pkg / "words.txt" in source_files(target)
    _write(pkg / "words.txt", "alpha\nbeta\n")  # data the reward may read
    assert source_version(target) != before


def test_built_in_versions_cover_their_local_imports(monkeypatch):
    code, math = (set(source_files(f"rewards.{m}")) for m in ("code", "math"))
    assert {REPO_ROOT / "rewards" / "code_judge.py", REPO_ROOT / "sandboxes" / "pool.py",
            REPO_ROOT / "curation" / "chat.py", REPO_ROOT / "rewards" / "base.py"} <= code
    assert REPO_ROOT / "curation" / "chat.py" in math and not any("sandboxes" in p.parts for p in math)
    assert REPO_ROOT / "rewards" / "code.py" not in math and REPO_ROOT / "rewards" / "math.py" not in code
    versions = reward_code_versions(["math", "code", "swe"])
    assert get_reward("code").version == versions["code"] == reward_versions(["code"])["code"]
    assert get_reward("swe", similarity="lexical").version == versions["swe"] + "-lexical"
    # An edit to a sandboxes file (faked at the reader) re-versions code, not math.
    read = hashing._read
    monkeypatch.setattr(hashing, "_FILES", {})
    monkeypatch.setattr(hashing, "_DIGESTS", {})
    monkeypatch.setattr(hashing, "_read", lambda p: read(p) + (b"# edited" if p.name == "pool.py" else b""))
    edited = reward_code_versions(["math", "code", "swe"])
    assert edited["code"] != versions["code"] and edited["math"] == versions["math"] and edited["swe"] == versions["swe"]


def test_versions_need_no_import(tmp_path, monkeypatch):
    name = f"never_run_{uuid.uuid4().hex[:8]}"
    _write(tmp_path / f"{name}.py", "raise SystemExit('a version must not run the module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reward_code_versions([f"{name}:fn"])[f"{name}:fn"] == source_version(str(tmp_path / f"{name}.py"))


def test_a_pinned_version_wins():
    reward = get_reward("swe", similarity="lexical")
    reward.version = "pinned"
    assert reward.version == "pinned" and get_reward("swe", similarity="lexical").version != "pinned"


def test_cascade_verify_a_user_reward_prints_its_version(user_module, tmp_path, capsys):
    from dagster_project.cli import main

    name, _ = user_module
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ({"completion": "abc", "answer": "abc"},
                                                          {"completion": "abcdefgh", "answer": "x"})))
    assert main(["verify", f"{name}:brevity", "--input", str(src), "--output", str(dst), "--option", "limit=4"]) == 0
    summary = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert summary["version"] == get_reward(f"{name}:brevity", limit=4).version
    assert summary["version"].startswith(source_version(f"{name}:brevity"))
    assert [json.loads(line)["reward"] for line in dst.read_text().splitlines()] == [1.0, 0.0]
    assert main(["verify", f"{name}:boom", "--input", str(src), "--output", str(dst)]) == 0
    assert {json.loads(line)["reason"] for line in dst.read_text().splitlines()} == {"reward_error"}
    capsys.readouterr()
    assert main(["verify", "rm", "--input", str(src), "--output", str(dst)]) == 2
    assert "reward-model" in capsys.readouterr().err
