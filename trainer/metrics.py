"""Per-step metrics: one row per step in metrics.parquet plus TensorBoard scalars under tb/.

On resume the rows already recorded for steps before the checkpoint are kept and later ones
dropped, so metrics.parquet of a resumed run matches an uninterrupted one step for step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.parquet"


class MetricsWriter:
    def __init__(self, output_dir: Path, tensorboard: bool = True, enabled: bool = True):
        self.path = Path(output_dir) / METRICS_FILE
        self.enabled = enabled
        self.rows: list[dict[str, Any]] = []
        self._tb = None
        self._tb_dir = Path(output_dir) / "tb" if tensorboard and enabled else None

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
        if self._tb_dir is not None:
            if self._tb is None:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self._tb_dir))
            for key, value in row.items():
                if key != "step" and isinstance(value, float) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)

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
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        self.flush()
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def format_line(step: int, total: int, values: dict[str, Any], keys: tuple[str, ...]) -> str:
    """A short human progress line with the most telling metrics."""
    parts = [f"step {step + 1}/{total}"]
    for key in keys:
        if key in values and isinstance(values[key], (int, float)):
            parts.append(f"{key}={values[key]:.4g}")
    return "  ".join(parts)
