"""Code versions follow the import closure of the entry points that run (spec.hashing.closure_version):
lazy imports inside functions count, modules nothing imports do not, nothing is imported to find them.
The e2e counterpart (tests/e2e/test_code_staleness.py) edits modules in a copy of the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spec.hashing import closure_version, source_files, source_version
from spec.kinds import stage_kind
from spec.paths import REPO_ROOT


def test_closure_follows_lazy_imports_and_is_a_union(tmp_path: Path) -> None:
    (tmp_path / "entry_a.py").write_text("import json\n\n\ndef run():\n    from helper_b import g\n    return g()\n")
    (tmp_path / "helper_b.py").write_text("def g():\n    return 1\n")
    (tmp_path / "other_c.py").write_text("X = 1\n")
    a, c = f"{tmp_path}/entry_a.py:run", f"{tmp_path}/other_c.py"
    assert {p.name for p in source_files(a)} == {"entry_a.py", "helper_b.py"}  # the function-level import too
    before, both = closure_version([a]), closure_version([a, c])
    assert both != before and closure_version([c, a]) == both  # a union: order does not matter
    # edits change the file's size, so its stat stamp moves even within one mtime tick
    (tmp_path / "other_c.py").write_text("X = 22\n")  # not imported by entry_a
    assert closure_version([a]) == before and closure_version([a, c]) != both
    (tmp_path / "helper_b.py").write_text("def g():\n    return 2222\n")  # imported inside a function only
    assert closure_version([a]) != before


def test_a_single_target_closure_is_its_source_version() -> None:
    target = "rewards.math:MathReward"
    assert closure_version([target], 12) == source_version(target)


def _files(*targets: str) -> set[str]:
    return {p.relative_to(REPO_ROOT).as_posix() for t in targets for p in source_files(t) if p.is_relative_to(REPO_ROOT)}


def _training(kind_name: str) -> set[str]:
    """What assets.checkpoints.training_code covers for a kind on the torch backend."""
    from trainer.stage import BACKENDS

    kind = stage_kind(kind_name)
    extra = ["trainer.stage:run_stage", BACKENDS["torch"]] if kind.family != "reward_model" else []
    return _files(kind.trainer, kind.config, *extra)


def test_training_closures_hold_what_training_runs_and_nothing_else() -> None:
    sft, rl, rm = _training("sft"), _training("math"), _training("reward_model")
    assert {"trainer/sft.py", "trainer/stage.py", "trainer/backends/torch_backend.py", "trainer/config.py"} <= sft
    assert {"trainer/grpo.py", "trainer/rollout.py", "generation/hf_sampler.py", "trainer/stage.py"} <= rl
    assert "rewards/reward_model.py" in rm and not any(f.startswith("trainer/") for f in rm)
    assert "trainer/grpo.py" not in sft  # the GRPO loss does not re-version SFT checkpoints
    for files in (sft, rl, rm):
        assert not files & {"trainer/cascade_report.py", "trainer/evaluate.py", "trainer/gates.py", "trainer/tts.py"}
        assert not any(f.startswith(("assets/", "dagster_project/")) for f in files)
    assert "rewards/math.py" not in rl  # rewards are versioned apart (rewards.registry.reward_code_versions)


def test_eval_closure_reaches_tts_only_through_a_plan() -> None:
    files = _files("trainer.evaluate:evaluate_checkpoint")
    assert "trainer/evaluate.py" in files and not files & {"trainer/tts.py", "rewards/math.py"}
    assert {"trainer/tts.py", "rewards/math.py"} <= _files("trainer.tts:TTSPlan")  # majority voting reads math


def test_versions_are_found_without_importing_the_code() -> None:
    code = ("import sys\n"
            "from spec.hashing import closure_version\n"
            "from spec.kinds import stage_kinds\n"
            "from trainer.stage import BACKENDS\n"
            "for kind in stage_kinds():\n"
            "    closure_version([kind.trainer, kind.config, 'trainer.stage:run_stage', *BACKENDS.values()])\n"
            "closure_version(['trainer.evaluate:evaluate_checkpoint', 'trainer.tts:TTSPlan', 'generation.hf:HFEngine'])\n"
            "heavy = [m for m in ('torch', 'transformers', 'trainer.grpo', 'trainer.sft', 'trainer.backends.torch_backend',\n"
            "                     'trainer.evaluate', 'generation.hf') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
