"""The two paths a new maintainer follows stay short (scripts/call_paths.py measures them by running them).

Counted as project frames on the Python stack when the call runs, from the checkpoint asset's body:
- a checkpoint asset to `SFTTrainer.train_step`: 5 hops through 5 files at 708a78b (asset ->
  run_sft -> run_stage -> the torch backend's run -> the loop's execute -> train_step), 3 and 3 now;
- an RL checkpoint asset to the reward's own scoring inside a GRPO step: 15 hops through 9 files at
  708a78b, 10 and 6 now.
A change that adds a layer to either fails here; raise a bound only with a reason in the commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.script_module import load_script

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "call_paths.py"


def _call_paths():
    return load_script(SCRIPT)


def test_checkpoint_to_train_step_and_to_the_reward_call_stay_short(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path))
    figures = _call_paths().measure(tmp_path)
    sft, reward = figures["sft_step"], figures["reward_call"]
    assert sft["stack"][0] == "assets/checkpoints.py:sft" and sft["stack"][-1] == "trainer/sft.py:train_step"
    assert sft["hops"] <= 3 and sft["files"] <= 3, sft["stack"]
    assert reward["stack"][0] == "assets/checkpoints.py:rl" and reward["stack"][-1] == "rewards/math.py:_score_batch"
    assert "trainer/grpo.py:train_step" in reward["stack"]  # measured inside a GRPO step
    assert reward["hops"] <= 10 and reward["files"] <= 6, reward["stack"]
    # the main line from a source to its SFT checkpoint reaches every output it writes
    assert {"assets/sources.py", "assets/corpora.py", "assets/checkpoints.py", "trainer/sft.py"} <= set(
        figures["source_to_checkpoint"]["file_list"])
