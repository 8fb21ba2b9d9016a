"""`cascade --help` starts without the heavy libraries (docs/architecture.md: they are imported
inside the functions that use them). The code location's twin is in tests/dagster_project/test_graph.py."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "sentence_transformers", "deepspeed", "polars", "vllm")


def test_cli_help_imports_no_heavy_library() -> None:
    code = ("import sys\nfrom dagster_project.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\nprint('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage:" in out.stdout and "HEAVY []" in out.stdout, out.stdout[-2000:]
