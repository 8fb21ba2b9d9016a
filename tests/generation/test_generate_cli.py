"""`cascade generate` end to end: the tiny model on the real `hf` engine (a rerun generates
nothing and writes the same bytes and data version; `--verify math`), a verifier that passes
some samples (fake arithmetic engine), and bad input exiting 2 with a clear message.

The command is registered here on the real `cascade` parser (dagster_project.cli) for the
test, whether or not cli.py lists dagster_project.generate_command yet.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from dagster_project import cli
from generation.engine import ENGINES

MODULE = "dagster_project.generate_command"
needs_hf = pytest.mark.skipif(importlib.util.find_spec("generation.hf") is None, reason="generation.hf not available yet")


@pytest.fixture
def cascade(monkeypatch: pytest.MonkeyPatch, cascade_home: Path, capsys: pytest.CaptureFixture):
    """Run `cascade ARGS` in process: (exit code, stdout lines, stderr)."""
    if MODULE not in cli._COMMAND_MODULES:
        monkeypatch.setattr(cli, "_COMMAND_MODULES", cli._COMMAND_MODULES + (MODULE,))

    def run(*argv: str) -> tuple[int, list[str], str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out.splitlines(), err

    return run


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [{"row_id": f"r{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(3)]


@needs_hf
def test_tiny_model_rerun_is_cached_and_byte_identical(cascade, tmp_path: Path, tiny_model_dir: Path) -> None:
    src = _write(tmp_path / "in.jsonl", ROWS)
    common = ["generate", "--model", str(tiny_model_dir), "--input", src, "--samples", "2", "--max-new-tokens", "8",
              "--seed", "5", "--cache", str(tmp_path / "cache"), "--no-progress"]
    code, lines, _ = cascade(*common, "--output", str(tmp_path / "a.jsonl"))
    first = json.loads(lines[-1])
    assert code == 0 and first["rows"] == 3 and first["generated"] == 12 and first["cached"] == 0
    assert first["kept"] == 12 and first["dropped"] == {}
    out = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [(r["row_id"], r["mode"], r["sample"]) for r in out[:4]] == [
        ("r0", "think", 0), ("r0", "think", 1), ("r0", "no_think", 0), ("r0", "no_think", 1)]
    assert all(set(r) == {"row_id", "prompt", "answer", "mode", "sample", "response", "finish_reason"} for r in out)

    code, lines, _ = cascade(*common, "--output", str(tmp_path / "b.jsonl"))
    second = json.loads(lines[-1])
    assert code == 0 and second["generated"] == 0 and second["cached"] == 12
    assert second["data_version"] == first["data_version"]
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()

    # --verify math on the same cache: scored and filtered, nothing generated.
    code, lines, _ = cascade(*common, "--output", str(tmp_path / "v.jsonl"), "--verify", "math", "--keep-all")
    verified = json.loads(lines[-1])
    assert code == 0 and verified["generated"] == 0
    assert verified["kept"] + sum(verified["dropped"].values()) == 12 == verified["written"]
    rows = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert all({"reward", "reason", "dropped"} <= set(r) and r["reason"] for r in rows)


def test_verify_keeps_passing_samples(cascade, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                      tiny_model_dir: Path) -> None:
    monkeypatch.setitem(ENGINES, "arith", "fake_engine:ArithmeticEngine")
    src = _write(tmp_path / "in.jsonl", ROWS)
    args = ["generate", "--model", str(tiny_model_dir), "--engine", "arith", "--input", src, "--samples", "4",
            "--modes", "think", "--verify", "math", "--threshold", "1", "--cache", str(tmp_path / "c"), "--no-progress"]
    code, lines, _ = cascade(*args, "--output", str(tmp_path / "o.jsonl"))
    summary = json.loads(lines[-1])
    assert code == 0 and summary["generated"] == 12 and summary["kept"] == 6
    assert summary["dropped"] == {"verifier_failed": 6} and summary["verifier_reasons"] == {"wrong_answer": 6}
    out = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["sample"] for r in out] == [0, 2] * 3 and {(r["reward"], r["reason"]) for r in out} == {(1.0, "correct")}
    code, lines, _ = cascade(*args, "--output", str(tmp_path / "q.jsonl"), "--max-per-prompt", "1")
    capped = json.loads(lines[-1])
    assert capped["generated"] == 0 and capped["kept"] == 3 and capped["dropped"] == {"verifier_failed": 6, "over_quota": 3}


def test_bad_input_exits_2(cascade, tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", ROWS)
    base = ["generate", "--input", src, "--output", str(tmp_path / "o.jsonl"), "--recipe", "recipes/tiny.yaml"]
    code, _, err = cascade(*base, "--model", "no-such-model")
    assert code == 2 and "unknown model 'no-such-model'" in err and "math_rl" in err
    code, _, err = cascade(*base, "--model", "math_rl_prompts")
    assert code == 2 and "is not a checkpoint" in err
    code, _, err = cascade(*base, "--model", "math_rl")
    assert code == 2 and "not materialized" in err
    code, _, err = cascade("generate", "--model", "tiny", "--input", str(tmp_path / "nope.jsonl"), "--output", "o")
    assert code == 2 and "no such file" in err
    code, _, err = cascade(*base, "--model", "tiny", "--modes", "think,fast")
    assert code == 2 and "--modes" in err
    bad = _write(tmp_path / "bad.jsonl", [{"question": "no prompt"}])
    code, _, err = cascade("generate", "--model", str(tmp_path), "--input", bad, "--output", "o")
    assert code == 2 and "config.json" in err


def test_model_names_resolve(monkeypatch: pytest.MonkeyPatch, cascade_home: Path, tiny_model_dir: Path) -> None:
    import trainer.models
    from dagster_project.generate_command import resolve_model

    asked = []
    monkeypatch.setattr(trainer.models, "make_tiny_model", lambda path, seed=0: asked.append(Path(path)) or tiny_model_dir)
    path, version = resolve_model("tiny")
    assert asked == [cascade_home / "models" / "tiny"] and path == str(tiny_model_dir) and len(version) == 32
    assert resolve_model(str(tiny_model_dir)) == (str(tiny_model_dir.resolve()), version)
    shutil.copytree(tiny_model_dir, cascade_home / "copied_model", dirs_exist_ok=True)
    assert resolve_model("${CASCADE_HOME}/copied_model") == (str(cascade_home / "copied_model"), version)
    assert resolve_model("served-model", engine="openai") == ("served-model", "served:served-model")
