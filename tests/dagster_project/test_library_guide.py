"""docs/library.md is executable: its python blocks run in order, in one namespace, in a fresh
process that never imports Dagster, and each prints exactly the ```text block shown under it.

`python tests/dagster_project/test_library_guide.py` rewrites those output blocks from a run (then
read the diff: an output that changed is a behaviour that changed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "library.md"
BLOCK = re.compile(r"```python\n(.*?)```\n\n```text\n(.*?)```", re.S)

# Runs the blocks given as a JSON list on stdin; writes [{"out": stdout of each block}, ...] and
# whether Dagster was imported to the file named by argv[1].
RUNNER = """
import contextlib, io, json, sys
blocks, outputs, namespace = json.load(sys.stdin), [], {"__name__": "__notebook__"}
for code in blocks:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(code, "docs/library.md", "exec"), namespace)
    outputs.append(buffer.getvalue())
with open(sys.argv[1], "w") as fh:
    json.dump({"outputs": outputs, "dagster": any(m.split(".")[0] == "dagster" for m in sys.modules)}, fh)
"""


def _blocks(text: str) -> list[tuple[str, str]]:
    return BLOCK.findall(text)


def run_guide(tmp: Path) -> dict:
    """Run the guide's blocks in a fresh process with its temporary files under `tmp`."""
    # DS_ACCELERATOR: DeepSpeed, which transformers imports, otherwise logs a timestamped line to stdout on a CPU
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DS_ACCELERATOR": "cpu", "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    report = tmp / "report.json"
    code = json.dumps([code for code, _ in _blocks(GUIDE.read_text(encoding="utf-8"))])
    done = subprocess.run([sys.executable, "-c", RUNNER, str(report)], input=code, text=True, cwd=ROOT, env=env,
                          capture_output=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(report.read_text())


def test_every_python_block_has_its_output() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    assert len(_blocks(text)) == text.count("```python") >= 6, "a python block without a ```text block under it"


def test_the_guide_runs_and_prints_what_it_shows(tmp_path: Path) -> None:
    report = run_guide(tmp_path)
    assert not report["dagster"], "a library the guide uses imports Dagster"
    shown = [out for _, out in _blocks(GUIDE.read_text(encoding="utf-8"))]
    for i, (expected, got) in enumerate(zip(shown, report["outputs"])):
        assert got == expected, f"docs/library.md block {i + 1} printed:\n{got}\nthe page shows:\n{expected}"
    assert len(report["outputs"]) == len(shown)
    made = list(tmp_path.glob("cascade-notebook-*/models/tiny/config.json"))
    assert made, "the guide did not write its files into its temporary folder"


def test_the_guide_names_both_tool_domains() -> None:
    from spec.kinds import stage_kind

    text = GUIDE.read_text(encoding="utf-8")
    assert "**`tool`, for SFT**" in text and "**`tool_call`, for RL**" in text
    assert "tool" in stage_kind("sft").source_domains and "tool_call" not in stage_kind("sft").source_domains
    for kind in ("multi_domain", "mopd"):
        assert "tool_call" in stage_kind(kind).source_domains and "tool" not in stage_kind(kind).source_domains


if __name__ == "__main__":  # rewrite the output blocks from a run
    with tempfile.TemporaryDirectory() as tmp:
        outputs = iter(run_guide(Path(tmp))["outputs"])
    GUIDE.write_text(BLOCK.sub(lambda m: f"```python\n{m.group(1)}```\n\n```text\n{next(outputs)}```",
                               GUIDE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"updated {GUIDE}")
