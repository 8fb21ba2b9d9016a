"""One line for the cause (issue 32): what `cascade` prints when something fails.

Each case of the issue, through the CLI on a small recipe of its own: a source whose reader the
file name cannot tell (`data.txt`), an empty file and an empty folder fail at recipe load with
their field paths (exit 2); a truncated parquet source prints `FAILED <asset>: <cause>` and the
log path, the traceback only in the log (and once with --debug), `failed` instead of `done`
(exit 1); a full disk names the home and its free space; a read-only home still answers
`lineage`, `status` and `report` from its records, and `run` says the home is read-only (exit 1).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dagster_project.cli import main

REPO = Path(__file__).resolve().parents[2]


def _openai(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"Name fruit number {i}."},
                         {"role": "assistant", "content": f"Fruit number {i} is a plum."}]}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    return tmp_path / "home"


def _recipe(tmp_path: Path, extra: list[dict] | None = None) -> str:
    """Sources `a` (good jsonl) and `b` (a parquet file cut in half), one benchmark."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    rows = [_openai(i) for i in range(12)]
    (data / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.table({"messages": [r["messages"] for r in rows]}), data / "full.parquet")
    whole = (data / "full.parquet").read_bytes()
    (data / "b.parquet").write_bytes(whole[: len(whole) // 2])
    (data / "bench.jsonl").write_text(json.dumps({"question": "What is the capital of a small country?"}) + "\n")
    recipe = {"name": "failures", "seed": 3, "model": {"base": "tiny"},
              "sources": [{"name": "a", "domain": "chat", "path": "data/a.jsonl"},
                          {"name": "b", "domain": "chat", "path": "data/b.parquet"}, *(extra or [])],
              "benchmarks": [{"name": "bench", "path": "data/bench.jsonl"}]}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_what_load_can_know_fails_at_load(tmp_path: Path, home: Path, capsys: pytest.CaptureFixture) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text(json.dumps(_openai(0)) + "\n")
    (data / "empty.jsonl").write_text("")
    (data / "nothing").mkdir()
    recipe = _recipe(tmp_path, [{"name": "txt", "domain": "chat", "path": "data/data.txt"},
                                {"name": "empty", "domain": "chat", "path": "data/empty.jsonl"},
                                {"name": "folder", "domain": "chat", "path": "data/nothing"},
                                {"name": "allowed", "domain": "chat", "path": "data/empty.jsonl", "min_rows": 0},
                                {"name": "named", "domain": "chat", "path": "data/data.txt", "reader": "jsonl"}])
    assert main(["run", "--recipe", recipe]) == 2
    err = capsys.readouterr().err
    assert "sources.2.reader: cannot tell the reader from the name 'data.txt'" in err and "set `reader`" in err
    assert f"sources.3.path: {data / 'empty.jsonl'} is empty (0 bytes)" in err
    assert f"sources.4.path: {data / 'nothing'} is an empty folder" in err
    assert "sources.5" not in err and "sources.6" not in err  # min_rows: 0 may be empty; `reader` named
    assert "Traceback" not in err and not (home / "data").exists()  # nothing ran


def test_a_truncated_parquet_prints_its_cause_once(tmp_path: Path, home: Path, capfd: pytest.CaptureFixture) -> None:
    recipe = _recipe(tmp_path)
    assert main(["run", "--recipe", recipe, "--select", "raw_b"]) == 1
    out, err = capfd.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("FAILED sources/raw_b: ")]
    assert len(lines) == 1 and "ArrowInvalid: " in lines[0] and "b.parquet" in lines[0]
    assert "DagsterExecutionStepExecutionError" not in out + err
    assert "Traceback" not in out + err and "Stack Trace" not in out + err and "_parquet_records" not in out + err
    assert "[cascade] sources/raw_b failed after" in err and "raw_b done" not in err
    log = Path(err.split("full traceback: ")[1].split()[0])
    assert log.parent == home / "logs" and "_parquet_records" in log.read_text()

    assert main(["run", "--recipe", recipe, "--select", "raw_b", "--debug"]) == 1
    out, err = capfd.readouterr()
    assert (out + err).count('in _parquet_records') == 1  # printed once, by cascade, not again by Dagster
    assert sum(line.startswith("FAILED sources/raw_b: ArrowInvalid") for line in err.splitlines()) == 1


def test_a_full_disk_names_the_home_and_its_free_space(tmp_path: Path, home: Path, capfd: pytest.CaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import curation.versioning

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(home / "data"))

    monkeypatch.setattr(curation.versioning, "write_versioned", full)
    assert main(["run", "--recipe", _recipe(tmp_path), "--select", "raw_a"]) == 1
    err = capfd.readouterr().err
    assert "FAILED sources/raw_a: OSError: [Errno 28] No space left on device" in err
    free = shutil.disk_usage(home).free
    assert f"the disk holding the home {home} is full (" in err and " free of " in err and free > 0
    assert "Traceback" not in err and "raw_a done" not in err


def test_a_full_disk_below_dagster_is_one_line(home: Path) -> None:
    """A full disk seen first by the instance's SQLite (through SQLAlchemy) reaches the CLI: one line."""
    from dagster_project.run_output import report_exception

    home.mkdir(parents=True)
    err = RuntimeError("(sqlite3.OperationalError) database or disk is full")
    message = report_exception("run", err, home)
    assert message is not None and f"the disk holding the home {home} is full" in message
    log = Path(message.split("full traceback: ")[1])
    assert log.parent == home / "logs" and "database or disk is full" in log.read_text()
    assert report_exception("run", RuntimeError("some other bug"), home) is None


def _as_unprivileged(cmd: list[str]) -> list[str]:
    """`cmd` without root's power to write into read-only folders (as root: setpriv drops it)."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: a chmod'd home stays writable")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *cmd]


def _cascade(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CASCADE_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("DAGSTER_HOME", None)
    cmd = _as_unprivileged([sys.executable, "-m", "dagster_project.cli", *args])
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)


def test_a_read_only_home_still_answers_from_its_records(tmp_path: Path, home: Path) -> None:
    recipe = _recipe(tmp_path)
    assert _cascade(["run", "--recipe", recipe, "--select", "+clean_a"], home).returncode == 0
    modes = {p: p.stat().st_mode for p in [home, *home.rglob("*")]}
    try:
        for p, mode in modes.items():
            p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        lineage = _cascade(["lineage", "clean_a", "--recipe", recipe], home)
        assert lineage.returncode == 0, lineage.stderr
        assert "raw_a" in lineage.stdout and "file_a" in lineage.stdout and "bench_bench" in lineage.stdout
        assert f"the home {home} is read-only" in lineage.stderr and "Traceback" not in lineage.stderr
        status = _cascade(["status", "--json", "--recipe", recipe], home)
        assert status.returncode == 0, status.stderr
        rows = {r["key"]: r for r in json.loads(status.stdout)}
        assert rows["curated/clean_a"]["materialized"] and rows["curated/clean_a"]["rows"]["kept"] == 12
        assert not rows["sources/raw_b"]["materialized"] and rows["curated/clean_a"]["stale"] is None
        report = _cascade(["report", "--recipe", recipe], home)
        assert report.returncode == 0, report.stderr
        run = _cascade(["run", "--recipe", recipe, "--select", "raw_a"], home)
        assert run.returncode == 1 and "Traceback" not in run.stderr
        assert f"cascade run: the home {home} is read-only" in run.stderr
        log = Path(run.stderr.split("full traceback: ")[1].split()[0])
        log.unlink()  # written to the temporary folder: the home takes nothing
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
