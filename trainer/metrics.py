"""Per-step metrics: one row per step in metrics.parquet, plus the recipe's trackers
(trainer.tracking: TensorBoard under tb/ by default, MLflow, W&B).

On resume the rows already recorded for steps before the checkpoint are kept and later ones
dropped, so metrics.parquet of a resumed run matches an uninterrupted one step for step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

METRICS_FILE = "metrics.parquet"


class MetricsWriter:
    def __init__(self, output_dir: Path, tensorboard: bool = True, enabled: bool = True,
                 tracking: Sequence[str] = (), run_name: str | None = None):
        """`tensorboard` adds the TensorBoard tracker; `tracking` names more (trainer.tracking.TRACKERS).
        Trackers start on the first logged step, so a stage that logs nothing creates no runs."""
        self.path = Path(output_dir) / METRICS_FILE
        self.enabled = enabled
        self.rows: list[dict[str, Any]] = []
        names = (["tensorboard"] if tensorboard else []) + list(tracking)
        self._tracker_names = list(dict.fromkeys(names)) if enabled else []
        self._trackers: list[Any] | None = None
        self._output_dir = Path(output_dir)
        self._run_name = run_name or self._output_dir.parent.name or self._output_dir.name

    def resume_from(self, step: int) -> None:
        """Keep recorded rows with step < `step` (the rest will be recomputed)."""
        if not self.enabled or not self.path.exists():
            return
        import pyarrow.parquet as pq

        self.rows = [r for r in pq.read_table(self.path).to_pylist() if r["step"] < step]

    def log(self, step: int, values: dict[str, Any]) -> None:
        if not self.enabled:
            return
        row = {"step": step, **{k: (float(v) if isinstance(v, (int, float)) else v) for k, v in values.items()}}
        self.rows.append(row)
        if self._tracker_names:
            from trainer.tracking import build_trackers, finite_scalars

            if self._trackers is None:
                self._trackers = build_trackers(self._tracker_names, self._output_dir, self._run_name)
            scalars = finite_scalars(row)
            for tracker in self._trackers:
                tracker.log(step, scalars)

    def flush(self) -> None:
        """Rewrite metrics.parquet (small: one row per step) and flush TensorBoard."""
        if not self.enabled:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys: list[str] = []
        for row in self.rows:
            keys += [k for k in row if k not in keys]
        table = pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in self.rows])
        tmp = self.path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.replace(self.path)
        for tracker in self._trackers or []:
            tracker.flush()

    def close(self) -> None:
        self.flush()
        for tracker in self._trackers or []:
            tracker.close()
        self._trackers = None


def format_line(step: int, total: int, values: dict[str, Any], keys: tuple[str, ...]) -> str:
    """A short human progress line with the most telling metrics."""
    parts = [f"step {step + 1}/{total}"]
    for key in keys:
        if key in values and isinstance(values[key], (int, float)):
            parts.append(f"{key}={values[key]:.4g}")
    return "  ".join(parts)
