"""Experiment trackers the per-step metrics also go to: TensorBoard, MLflow, Weights & Biases.

What: `build_trackers(names, output_dir, run_name)` gives one object per tracker with
`log(step, scalars)` and `close()`; trainer.metrics.MetricsWriter feeds every finite scalar of
every step to each of them (metrics.parquet stays the record the platform reads).

  tensorboard  event files under output_dir/tb (torch.utils.tensorboard; always installed)
  mlflow       one run per stage in experiment `cascade` of MLFLOW_TRACKING_URI, by default a
               local file store `$CASCADE_HOME/mlruns` (`pip install '.[mlflow]'`)
  wandb        one run per stage in project `cascade` (WANDB_PROJECT), offline unless
               WANDB_MODE says otherwise, files under output_dir (`pip install '.[wandb]'`)

Why optional: teams already look at MLflow or W&B; the platform must not need either. The
recipe picks them (`tracking: [tensorboard, mlflow, wandb]`); the TRL backend hands the same
names to TRL's `report_to` (`trl_report_to`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Protocol, Sequence

TRACKERS = ("tensorboard", "mlflow", "wandb")


class Tracker(Protocol):
    """Where per-step scalars go besides metrics.parquet."""

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """Record finite scalars of one step."""

    def flush(self) -> None:
        """Make what was logged durable."""

    def close(self) -> None:
        """Finish the run."""


class TensorBoardTracker:
    def __init__(self, output_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(output_dir) / "tb"))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def mlflow_uri() -> str:
    """MLFLOW_TRACKING_URI, else a local file store under $CASCADE_HOME/mlruns (MLflow 3 keeps
    file stores behind MLFLOW_ALLOW_FILE_STORE, which is then set unless the environment says)."""
    from spec.paths import cascade_home

    uri = os.environ.get("MLFLOW_TRACKING_URI") or (Path(cascade_home()) / "mlruns").resolve().as_uri()
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


class MLflowTracker:
    """One MLflow run through the client API (no global active run, so stages never collide)."""

    def __init__(self, run_name: str, experiment: str = "cascade"):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=mlflow_uri())
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.client.log_metric(self.run_id, key.replace("/", "_"), value, step=step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbTracker:
    """A W&B run, offline by default (sync later with `wandb sync`)."""

    def __init__(self, output_dir: Path, run_name: str):
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "cascade"), name=run_name,
                              dir=str(output_dir), mode=os.environ.get("WANDB_MODE", "offline"), reinit=True)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.run.finish()


def build_trackers(names: Sequence[str], output_dir: str | os.PathLike, run_name: str) -> list[Tracker]:
    """Trackers by name (unknown names raise; a missing optional package says which extra to install)."""
    out: list[Tracker] = []
    for name in dict.fromkeys(names):
        if name not in TRACKERS:
            raise ValueError(f"unknown tracker {name!r}; known: {', '.join(TRACKERS)}")
        try:
            if name == "tensorboard":
                out.append(TensorBoardTracker(Path(output_dir)))
            elif name == "mlflow":
                out.append(MLflowTracker(run_name))
            else:
                out.append(WandbTracker(Path(output_dir), run_name))
        except ModuleNotFoundError as err:
            raise RuntimeError(f"tracking: {name} needs its package: pip install 'cascade-platform[{name}]' "
                               f"({err})") from err
    return out


def finite_scalars(row: dict[str, Any]) -> dict[str, float]:
    """The finite float values of a metrics row, without its step."""
    return {k: v for k, v in row.items() if k != "step" and isinstance(v, float) and math.isfinite(v)}


def trl_report_to(names: Sequence[str]) -> list[str] | str:
    """TRL's `report_to` for the recipe's trackers: mlflow and wandb pass through (TensorBoard
    stays the platform's own event files), "none" when there are none. Sets the same defaults
    the platform's trackers use (local MLflow store, offline W&B) unless the environment has its own."""
    passed = [n for n in dict.fromkeys(names) if n in ("mlflow", "wandb")]
    if "mlflow" in passed:
        os.environ.setdefault("MLFLOW_TRACKING_URI", mlflow_uri())
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", "cascade")
    if "wandb" in passed:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_PROJECT", "cascade")
    return passed or "none"
