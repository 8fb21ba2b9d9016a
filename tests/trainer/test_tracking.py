"""Experiment tracking: TensorBoard as before, MLflow (local file store) and W&B (offline) as
optional extras, the recipe's `tracking` reaching every stage, TRL's report_to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from trainer.metrics import MetricsWriter
from trainer.tracking import build_trackers, trl_report_to


def _log_three(writer: MetricsWriter) -> None:
    for step in range(3):
        writer.log(step, {"loss": 1.0 - 0.25 * step, "reward_mean": 0.1 * step, "note": "x", "nan": float("nan")})
    writer.close()


def test_tensorboard_by_default(tmp_path):
    _log_three(MetricsWriter(tmp_path))
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert (tmp_path / "metrics.parquet").exists()
    off = tmp_path / "off"
    off.mkdir()
    _log_three(MetricsWriter(off, tensorboard=False))
    assert not (off / "tb").exists() and (off / "metrics.parquet").exists()


def test_unknown_tracker_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown tracker"):
        build_trackers(["neptune"], tmp_path, "run")


def test_mlflow_local_file_store(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    (tmp_path / "math_rl" / "v1").mkdir(parents=True)
    _log_three(MetricsWriter(tmp_path / "math_rl" / "v1", tensorboard=False, tracking=["mlflow"]))
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("cascade")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == "math_rl" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.75), (2, 0.5)]
    assert not client.get_metric_history(run.info.run_id, "nan")  # non-finite values are not sent


def _live_children() -> set[int]:
    """PIDs of this process's children that are still running (zombies excluded), from /proc."""
    me, out = os.getpid(), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


def test_wandb_offline(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    before = _live_children()
    try:
        _log_three(MetricsWriter(tmp_path, tensorboard=False, tracking=["wandb"]))
        (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
        (log,) = run_dir.glob("run-*.wandb")  # the offline run's records, for `wandb sync`
        assert log.stat().st_size > 0
    finally:
        wandb.teardown()  # stops the wandb-core service the run started (it outlives run.finish())
    assert not _live_children() - before, "a W&B service process outlived the test"


def test_recipe_tracking_reaches_every_stage(tmp_path):
    from dagster_project.recipe import parse_recipe
    from spec.paths import REPO_ROOT

    data = yaml.safe_load((REPO_ROOT / "recipes" / "tiny.yaml").read_text())
    data["tracking"] = ["tensorboard", "mlflow"]
    data["rl_stages"][0]["train"]["tracking"] = ["wandb"]  # a stage's own choice wins
    recipe = parse_recipe(data, REPO_ROOT / "recipes" / "tiny.yaml")
    stages = [*recipe.sft_stages, *recipe.rl_stages]
    assert all(s.train.tracking == ["mlflow"] for s in stages if s is not recipe.rl_stages[0])
    assert recipe.rl_stages[0].train.tracking == ["wandb"]
    assert all(s.train.tensorboard for s in stages if s is not recipe.rl_stages[0])
    plain = parse_recipe(yaml.safe_load((REPO_ROOT / "recipes" / "tiny.yaml").read_text()), REPO_ROOT / "recipes" / "tiny.yaml")
    assert all(s.train.tracking == [] and s.train.tensorboard for s in [*plain.sft_stages, *plain.rl_stages])


def test_trl_report_to_passes_trackers_through(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "MLFLOW_EXPERIMENT_NAME", "WANDB_MODE", "WANDB_PROJECT"):
        monkeypatch.setenv(name, "")  # recorded, so the test's own settings are undone afterwards
        monkeypatch.delenv(name)
    assert trl_report_to([]) == "none" and trl_report_to(["tensorboard"]) == "none"
    assert trl_report_to(["tensorboard", "mlflow", "wandb"]) == ["mlflow", "wandb"]
    import os

    assert os.environ["MLFLOW_TRACKING_URI"].startswith("file:") and os.environ["WANDB_MODE"] == "offline"
