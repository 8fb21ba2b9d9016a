"""`cascade generate --model <a materialized checkpoint>` end to end: a one-source recipe's SFT
checkpoint is materialized on the tiny model, then sampled by name through the real `hf` engine.
The run generates from that checkpoint's folder (Dagster stores it as `${CASCADE_HOME}/...`; the
resolver expands it) and keys the cache on its data version, so naming the same folder by its
`${CASCADE_HOME}` path generates nothing new; a checkpoint whose folder is gone is a clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dagster_project.cli import main

pytestmark = pytest.mark.slow

RECIPE = """\
name: generate_checkpoint
seed: 5
model: {base: tiny}
sources:
  - {name: math_sft, domain: math, path: "${CASCADE_HOME}/samples/math_sft.jsonl", generate: math_sft, limit: 8}
sft_stages:
  - {name: sft, sources: [math_sft], max_tokens: 256,
     train: {epochs: 1, batch_size: 4, learning_rate: 5.0e-5, max_length: 256, max_steps: 1}}
"""
PROMPTS = [{"row_id": f"p{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(3)]


def test_generate_from_a_materialized_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    from dagster_project.commands import _context, get_instance, resolve_key
    from spec.paths import HOME_TOKEN

    home = tmp_path / "home"
    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in PROMPTS))
    assert main(["run", "--recipe", str(recipe)]) == 0

    _, defs, _ = _context(str(recipe))
    event = get_instance().get_latest_materialization_event(resolve_key(defs, "sft"))
    meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    stored, version = str(meta["path"]), str(meta["data_version"])
    assert stored.startswith(HOME_TOKEN)  # what the engine was once handed unexpanded
    folder = home / stored[len(HOME_TOKEN):].lstrip("/")
    assert (folder / "model.safetensors").is_file()

    def generate(model: str, out: str) -> tuple[int, dict | None, str]:
        capsys.readouterr()
        code = main(["generate", "--model", model, "--recipe", str(recipe), "--input", str(prompts),
                     "--output", str(tmp_path / out), "--samples", "2", "--modes", "no_think",
                     "--max-new-tokens", "8", "--cache", str(tmp_path / "cache"), "--no-progress"])
        captured = capsys.readouterr()
        lines = captured.out.splitlines()
        return code, json.loads(lines[-1]) if code == 0 else None, captured.err

    code, summary, err = generate("sft", "by_name.jsonl")
    assert code == 0, err
    assert summary["model"] == str(folder.resolve()) and summary["model_version"] == version
    assert summary["generated"] == 6 and summary["cached"] == 0 and summary["engine"].startswith("hf@")
    rows = [json.loads(line) for line in (tmp_path / "by_name.jsonl").read_text().splitlines()]
    assert [(r["row_id"], r["mode"], r["sample"]) for r in rows] == [
        (p["row_id"], "no_think", s) for p in PROMPTS for s in range(2)]
    assert all(isinstance(r["response"], str) and r["finish_reason"] in ("stop", "length") for r in rows)

    # the same folder named by its stored path: the same model and version, so every sample is cached
    code, again, err = generate(stored, "by_path.jsonl")
    assert code == 0, err
    assert (again["model"], again["model_version"]) == (summary["model"], version)
    assert again["generated"] == 0 and again["cached"] == 6 and again["data_version"] == summary["data_version"]

    # a checkpoint whose folder is gone: a clear error, nothing generated
    shutil.move(folder, tmp_path / "moved")
    code, _, err = generate("sft", "gone.jsonl")
    assert code == 2 and "--model sft" in err and "cascade run --select sft" in err
    assert not (tmp_path / "gone.jsonl").exists()
