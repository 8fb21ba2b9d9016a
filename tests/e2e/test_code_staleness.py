"""Editing library code makes exactly the assets whose code it is stale (issue 32, point 5).

The repository is copied into tmp_path and its `cascade` runs there in a subprocess (PYTHONPATH and
cwd at the copy), so editing the copy's modules is what a user editing their checkout does. The
tiny recipe is materialized once, without its two generations (they verify teacher samples with
the math reward, so a math edit would rightly restale the SFT data they feed); then three edits,
each followed by `cascade status --json` and reverted:

- the report (trainer/cascade_report.py): only the forgetting matrix, which renders it; no
  checkpoint, no eval (a checkpoint's code is the import closure of its training's entry points);
- the GRPO loss (trainer/grpo.py): the RL checkpoints, their evals, the forgetting matrix; not the
  base model, the SFT checkpoints, the reward model, a dataset or the evals of the others;
- the math reward (rewards/math.py): math RL and the RL stages after it, every eval that scores the
  math domain (with `scope: all`, each), the forgetting matrix. An eval of an unchanged checkpoint
  then evaluates the math domain alone and takes the other domains' cells from its earlier report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from spec.paths import REPO_ROOT

pytestmark = pytest.mark.slow

RL = ("rlhf", "if_rl", "math_rl", "code_rl", "swe_rl")


def _copy_repository(dest: Path) -> None:
    """The working tree's files git knows of or would add (tracked and untracked, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO_ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _recipe(path: Path) -> Path:
    """recipes/tiny.yaml without its generations (their verifier is the math reward, see above)."""
    recipe = yaml.safe_load((REPO_ROOT / "recipes" / "tiny.yaml").read_text())
    inputs = {g["name"]: g["input"] for g in recipe.pop("generations")}  # a stage reads the generation's input
    for stage in [*recipe["sft_stages"], *recipe["rl_stages"]]:
        stage["sources"] = list(dict.fromkeys(inputs.get(s, s) for s in stage["sources"]))
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


class Copy:
    """The copied repository, its home and the recipe; `cascade(...)` runs the copy's CLI."""

    def __init__(self, tmp: Path) -> None:
        self.root, self.home = tmp / "repo", tmp / "home"
        _copy_repository(self.root)
        self.recipe = _recipe(tmp / "recipe.yaml")
        self.env = {**os.environ, "PYTHONPATH": str(self.root), "CASCADE_HOME": str(self.home),
                    "DAGSTER_HOME": str(self.home / "dagster"), "HF_HUB_OFFLINE": "1"}

    def cascade(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "dagster_project.cli", *args, "--recipe", str(self.recipe)],
                              cwd=self.root, env=self.env, capture_output=True, text=True)
        assert done.returncode == 0, f"cascade {' '.join(args)}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        return done.stdout

    def status(self) -> dict[str, dict]:
        return {row["asset"]: row for row in json.loads(self.cascade("status", "--json"))}

    def stale_after_editing(self, rel: str) -> tuple[set[str], dict[str, dict]]:
        """Stale assets with a comment appended to module `rel` of the copy (then restored)."""
        path = self.root / rel
        original = path.read_bytes()
        path.write_bytes(original + b"\n# an edit: its bytes, and so its version, change\n")
        try:
            status = self.status()
        finally:
            path.write_bytes(original)
        return {a for a, r in status.items() if r["stale"]}, status


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Copy]:
    tmp = tmp_path_factory.mktemp("code_staleness")
    repo = Copy(tmp)
    assert repo.root.resolve() != REPO_ROOT.resolve()
    repo.cascade("run")
    yield repo
    shutil.rmtree(tmp, ignore_errors=True)


def _own_code_changed(row: dict) -> bool:
    return any(c.startswith(f"{row['key']}: ") and "code version" in c for c in row["stale_causes"])


def test_staleness_follows_the_code_each_asset_runs(copy: Copy) -> None:
    status = copy.status()
    assert all(r["materialized"] for r in status.values()), [a for a, r in status.items() if not r["materialized"]]
    assert not [a for a, r in status.items() if r["stale"]]
    evals = {a for a in status if a.startswith("eval_")}
    assert evals == {f"eval_{s}" for s in ("base_model", "sft_stage1", "sft_stage2", *RL)}

    # The report's code: the report is rendered again, nothing is trained or evaluated again.
    stale, rows = copy.stale_after_editing("trainer/cascade_report.py")
    assert stale == {"forgetting_matrix"}, stale
    assert _own_code_changed(rows["forgetting_matrix"]), rows["forgetting_matrix"]["stale_causes"]

    # The GRPO loss: every RL checkpoint (each runs it), and what reads them; SFT and the data do not move.
    stale, rows = copy.stale_after_editing("trainer/grpo.py")
    assert stale == {*RL, *(f"eval_{s}" for s in RL), "forgetting_matrix"}, stale
    assert all(_own_code_changed(rows[s]) for s in RL), {s: rows[s]["stale_causes"] for s in RL}

    # The math reward: math RL (its reward) and the stages after it; every eval's math domain.
    stale, rows = copy.stale_after_editing("rewards/math.py")
    assert stale == {"math_rl", "code_rl", "swe_rl", *evals, "forgetting_matrix"}, stale
    assert _own_code_changed(rows["math_rl"]) and not _own_code_changed(rows["code_rl"])
    assert all(_own_code_changed(rows[e]) for e in evals), {e: rows[e]["stale_causes"] for e in evals}


def test_an_edited_eval_reward_reevaluates_its_domain_only(copy: Copy) -> None:
    before = copy.status()["eval_sft_stage1"]["data_version"]
    folder = copy.home / "evals" / "sft_stage1"
    old = json.loads((folder / before / "eval.json").read_text())
    math = copy.root / "rewards" / "math.py"
    original = math.read_bytes()
    math.write_bytes(original + b"\n# an edit\n")
    try:
        copy.cascade("run", "--select", "eval_sft_stage1")
        row = copy.status()["eval_sft_stage1"]
    finally:
        math.write_bytes(original)
    assert not row["stale"] and row["data_version"] != before
    record = json.loads((folder / row["data_version"] / "lineage.json").read_text())
    new = json.loads((folder / row["data_version"] / "eval.json").read_text())
    assert set(new) == set(old) and "math" in new
    assert record["reused_domains"] == {d: before for d in old if d != "math"}  # math alone was evaluated
    assert {d: new[d] for d in old if d != "math"} == {d: old[d] for d in old if d != "math"}
    assert record["domain_versions"]["math"] != json.loads((folder / before / "lineage.json").read_text())[
        "domain_versions"]["math"]
