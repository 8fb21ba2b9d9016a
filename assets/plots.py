"""Small matplotlib renderings embedded in asset metadata as markdown images (data URIs),
so the Dagster UI shows reward curves and the forgetting matrix without extra services."""


import base64
import io
from typing import Any


def _png_markdown(fig: Any, alt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return f"![{alt}](data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()})"


def reward_curve_markdown(df: Any) -> str | None:
    """Reward (and loss) per step from a trainer metrics frame (polars)."""
    columns = [c for c in ("reward_mean", "loss") if c in df.columns]
    if not columns or df.height == 0:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(columns), figsize=(4 * len(columns), 2.6))
    axes = axes if len(columns) > 1 else [axes]
    steps = df["step"].to_list() if "step" in df.columns else list(range(df.height))
    for ax, col in zip(axes, columns):
        ax.plot(steps, df[col].to_list(), marker="o")
        ax.set_title(col)
        ax.set_xlabel("step")
    return _png_markdown(fig, "training curve")


def matrix_markdown(domains: list[str], checkpoints: list[str], scores: dict[str, dict[str, float | None]]) -> str:
    """Forgetting matrix as a markdown table: rows are domains, columns checkpoints."""
    head = "| domain | " + " | ".join(checkpoints) + " |"
    sep = "|---|" + "---:|" * len(checkpoints)
    rows = []
    for d in domains:
        cells = [scores.get(c, {}).get(d) for c in checkpoints]
        rows.append(f"| {d} | " + " | ".join("–" if v is None else f"{v:.1f}" for v in cells) + " |")
    return "\n".join([head, sep, *rows])


def domain_panels_markdown(report: dict[str, Any]) -> str | None:
    """One panel per domain (each its own y-scale: the reward model's score and 0–100 pass rates
    do not share an axis): score per checkpoint with its 95% interval as error bars."""
    domains, checkpoints, matrix = report["domains"], report["checkpoints"], report["matrix"]
    if not domains:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(domains), figsize=(max(3.0, 0.5 * len(checkpoints) + 1.5) * len(domains), 3),
                             squeeze=False)
    for ax, d in zip(axes[0], domains):
        xs = [i for i, c in enumerate(checkpoints) if matrix[c].get(d)]
        cells = [matrix[checkpoints[i]][d] for i in xs]
        ys = [c["score"] for c in cells]
        err = [[c["score"] - c["lo"] for c in cells], [c["hi"] - c["score"] for c in cells]]
        if xs:
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3)
        ax.set_title(d if xs else f"{d} (missing)")
        ax.set_xticks(range(len(checkpoints)), checkpoints, rotation=60, fontsize=7)
        ax.set_ylabel("points")
    fig.tight_layout()
    return _png_markdown(fig, "held-out score per domain")
