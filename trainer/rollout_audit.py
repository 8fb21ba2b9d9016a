"""Per-rollout audit table of an RL checkpoint: `rollouts.parquet`, its summary, `cascade audit`.

What: one row per rollout per step, in ROLLOUT_SCHEMA: step, refill round, prompt id (`row_id` of
the RL prompt set), mode, sample index within its group, completion text and token count,
truncation, the weighted total reward, and `rewards`, a list with one struct per reward of the
stage (name, version, weight, score, reason, infra_error, detail).
Why one row per rollout with a list column (not one row per (rollout, reward)): the completion,
the largest field by far, is stored once; `reward_rows` explodes the list when a long table is
handier (filtering by reward and reason; DuckDB `UNNEST(rewards)` and polars `explode` do the same).

Resume-safe: each step is a part file under output_dir/checkpoints/rollouts/, written atomically
by the main rank; the first step a process trains drops every part from that step on (steps a
killed run wrote after its last checkpoint), and the last step merges the parts into
output_dir/rollouts.parquet. The finished stage removes checkpoints/ with the parts in it.

`summarize_rollouts` reads the table into a JSON-able summary (distribution of the total reward,
per reward its versions, score distribution, reasons by count and a few examples per reason);
`format_summary` renders it for a terminal (`cascade audit`), `summary_markdown` for Dagster
metadata. No torch or Dagster import.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trainer.checkpointing import CHECKPOINTS

ROLLOUTS_FILE = "rollouts.parquet"
PARTS_DIR = "rollouts"  # under output_dir/checkpoints/
DETAIL_CHARS = 1000  # a reason's free-text detail is cut to this length in the table
STAGES_DIR = "checkpoints"  # the platform's $CASCADE_HOME/checkpoints/<stage>/<version>/ (assets.common)

REWARD_TYPE = pa.struct([("name", pa.string()), ("version", pa.string()), ("weight", pa.float64()),
                         ("score", pa.float64()), ("reason", pa.string()), ("infra_error", pa.bool_()),
                         ("detail", pa.string())])
ROLLOUT_SCHEMA = pa.schema([
    ("step", pa.int64()), ("round", pa.int32()), ("prompt_id", pa.string()), ("mode", pa.string()),
    ("sample", pa.int32()), ("completion", pa.string()), ("completion_tokens", pa.int32()),
    ("truncated", pa.bool_()), ("reward", pa.float64()), ("rewards", pa.list_(REWARD_TYPE)),
])
"""Columns of rollouts.parquet (one row per rollout per step)."""


def reward_entry(name: str, version: str, weight: float, result: Any) -> dict[str, Any]:
    """One element of a row's `rewards` list from a rewards.base.RewardResult."""
    detail = result.detail
    return {"name": name, "version": version, "weight": float(weight), "score": result.score,
            "reason": result.reason, "infra_error": bool(result.infra_error),
            "detail": None if detail is None else str(detail)[:DETAIL_CHARS]}


class RolloutAudit:
    """Writes a stage's audit table: a part file per step, merged into rollouts.parquet at the end."""

    def __init__(self, output_dir: str | Path, enabled: bool = True):
        self.output_dir, self.enabled = Path(output_dir), enabled
        self.parts = self.output_dir / CHECKPOINTS / PARTS_DIR
        self._fresh = True  # nothing written by this process yet

    def _part_steps(self) -> list[tuple[int, Path]]:
        if not self.parts.is_dir():
            return []
        found = [(int(p.stem[5:]), p) for p in self.parts.glob("step_*.parquet") if p.stem[5:].isdigit()]
        return sorted(found)

    def drop_from(self, step: int) -> None:
        """Remove parts of steps >= `step` (and unfinished writes): they are about to be redone."""
        for s, path in self._part_steps():
            if s >= step:
                path.unlink()
        for tmp in self.parts.glob("*.tmp") if self.parts.is_dir() else []:
            tmp.unlink()
        (self.output_dir / ROLLOUTS_FILE).unlink(missing_ok=True)

    def write_step(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Record one step's rollouts (rows in ROLLOUT_SCHEMA), replacing any earlier record of it."""
        if not self.enabled:
            return
        if self._fresh:  # a resumed (or restarted) run redoes every step from here
            self.drop_from(step)
            self._fresh = False
        self.parts.mkdir(parents=True, exist_ok=True)
        target = self.parts / f"step_{step:08d}.parquet"
        tmp = target.with_suffix(".tmp")
        pq.write_table(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA), tmp)
        os.replace(tmp, target)

    def finish(self) -> Path | None:
        """Merge every part, in step order, into output_dir/rollouts.parquet (streamed, atomic)."""
        if not self.enabled:
            return None
        target = self.output_dir / ROLLOUTS_FILE
        tmp = target.with_name(f".{ROLLOUTS_FILE}.tmp")
        with pq.ParquetWriter(tmp, ROLLOUT_SCHEMA, compression="zstd") as writer:
            for _, path in self._part_steps():
                writer.write_table(pq.read_table(path, schema=ROLLOUT_SCHEMA))
        os.replace(tmp, target)
        return target


# -- reading --------------------------------------------------------------------------------

def rollouts_file(path: str | Path) -> Path:
    """rollouts.parquet of a checkpoint folder (or the file itself); FileNotFoundError if absent."""
    path = Path(path)
    target = path if path.suffix == ".parquet" else path / ROLLOUTS_FILE
    if not target.is_file():
        raise FileNotFoundError(f"{target} not found: only GRPO checkpoints trained with the rollout audit "
                                "have a per-rollout table")
    return target


def read_rollouts(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """The audit table of a checkpoint folder (or of a rollouts.parquet path)."""
    return pq.read_table(rollouts_file(path), columns=columns)


def reward_rows(table: pa.Table) -> pa.Table:
    """Long form: one row per (rollout, reward): `rollout` (the row index in `table`), the rollout's
    columns (its total reward renamed `total_reward`), then the reward's name, version,
    `reward_weight`, score, reason, infra_error and detail.
    """
    lists = table.column("rewards").combine_chunks()
    parents = pc.list_parent_indices(lists)
    flat = lists.flatten()
    out = {"rollout": parents}
    for name in table.column_names:
        if name != "rewards":
            out[name] = table.column(name).take(parents)
    for field in REWARD_TYPE:
        out[f"reward_{field.name}" if field.name == "weight" else field.name] = flat.field(field.name)
    out["total_reward"] = out.pop("reward")
    return pa.table(out)


# -- summary --------------------------------------------------------------------------------

def _quantile(ordered: list[float], q: float) -> float:
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def distribution(values: list[float], bins: int = 10) -> dict[str, Any]:
    """count, mean, std, min, max, quantiles (p10..p90) and an equal-width histogram of `values`."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    n, lo, hi = len(ordered), ordered[0], ordered[-1]
    mean = sum(ordered) / n
    width = (hi - lo) / bins if hi > lo else 0.0
    counts = [0] * (bins if width else 1)
    for v in ordered:
        counts[min(int((v - lo) / width), bins - 1) if width else 0] += 1
    edges = [lo + k * width for k in range(bins)] + [hi] if width else [lo, hi]
    return {"count": n, "mean": mean, "std": math.sqrt(sum((v - mean) ** 2 for v in ordered) / n),
            "min": lo, "max": hi,
            "quantiles": {f"p{int(q * 100)}": _quantile(ordered, q) for q in (0.1, 0.25, 0.5, 0.75, 0.9)},
            "histogram": {"edges": edges, "counts": counts}}


def _spread(indices: list[Any], k: int) -> list[Any]:
    """k items spread evenly over `indices` (first and last included): early and late steps."""
    if len(indices) <= k:
        return indices
    if k <= 1:
        return indices[:k]
    return [indices[round(j * (len(indices) - 1) / (k - 1))] for j in range(k)]


def _completions(path: Path, wanted: set[int]) -> dict[int, str]:
    """Completion texts of the rows `wanted`, streamed so the whole column is never in memory."""
    out: dict[int, str] = {}
    offset = 0
    for batch in pq.ParquetFile(path).iter_batches(columns=["completion"], batch_size=8192):
        here = sorted(i - offset for i in wanted if offset <= i < offset + batch.num_rows)
        if here:
            for i, text in zip(here, batch.column(0).take(pa.array(here)).to_pylist()):
                out[i + offset] = text or ""
        offset += batch.num_rows
    return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(0, limit - 1)] + "…"


def summarize_rollouts(path: str | Path, examples_per_reason: int = 2, max_chars: int = 200) -> dict[str, Any]:
    """JSON-able summary of a checkpoint's rollouts.parquet (`path`: the folder or the file).

    Keys: path, rollouts, steps {count, first, last}, prompts, modes {mode: n}, reward (distribution
    of the weighted total), rewards {name: {versions, weight, score (distribution), infra_errors,
    reasons {reason: n, most frequent first}, examples {reason: [{step, prompt_id, mode, score,
    completion (first `max_chars` characters)}]}}}.
    """
    file = rollouts_file(path)
    table = pq.read_table(file, columns=[c for c in ROLLOUT_SCHEMA.names if c != "completion"])
    steps = table.column("step").to_pylist()
    prompt_ids, modes = table.column("prompt_id").to_pylist(), table.column("mode").to_pylist()
    per_reward: dict[str, dict[str, Any]] = {}
    seen: dict[tuple[str, str], list[tuple[int, float | None]]] = {}  # (reward, reason) -> (row, score)
    for row, entries in enumerate(table.column("rewards").to_pylist()):
        for e in entries or []:
            acc = per_reward.setdefault(e["name"], {"versions": set(), "weight": e["weight"], "scores": [],
                                                    "infra_errors": 0, "reasons": Counter()})
            acc["versions"].add(e["version"])
            acc["infra_errors"] += int(bool(e["infra_error"]))
            acc["reasons"][e["reason"]] += 1
            if e["score"] is not None:
                acc["scores"].append(e["score"])
            seen.setdefault((e["name"], e["reason"]), []).append((row, e["score"]))
    picked = {key: _spread(hits, examples_per_reason) for key, hits in seen.items()}
    texts = _completions(file, {row for hits in picked.values() for row, _ in hits})
    rewards = {}
    for name, acc in per_reward.items():
        examples = {reason: [{"step": steps[i], "prompt_id": prompt_ids[i], "mode": modes[i], "score": score,
                              "completion": _cut(texts.get(i, ""), max_chars)} for i, score in picked[(name, reason)]]
                    for reason, _ in acc["reasons"].most_common()}
        rewards[name] = {"versions": sorted(acc["versions"]), "weight": acc["weight"],
                         "score": distribution(acc["scores"]), "infra_errors": acc["infra_errors"],
                         "reasons": dict(acc["reasons"].most_common()), "examples": examples}
    return {"path": str(file), "rollouts": table.num_rows,
            "steps": {"count": len(set(steps)), "first": min(steps, default=None), "last": max(steps, default=None)},
            "prompts": len(set(prompt_ids)), "modes": dict(Counter(modes).most_common()),
            "reward": distribution([v for v in table.column("reward").to_pylist() if v is not None]),
            "rewards": rewards}


# -- rendering ------------------------------------------------------------------------------

def _g(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _stats_line(d: dict[str, Any]) -> str:
    if not d.get("count"):
        return "n=0"
    q = d["quantiles"]
    return (f"n={d['count']}  mean {_g(d['mean'])}  std {_g(d['std'])}  min {_g(d['min'])}  p25 {_g(q['p25'])}  "
            f"median {_g(q['p50'])}  p75 {_g(q['p75'])}  max {_g(d['max'])}")


def _bars(d: dict[str, Any], width: int = 30) -> list[str]:
    if not d.get("count"):
        return []
    edges, counts = d["histogram"]["edges"], d["histogram"]["counts"]
    top = max(counts)
    return [f"  [{_g(edges[k]):>8}, {_g(edges[k + 1]):>8}{']' if k == len(counts) - 1 else ')'} "
            f"{'█' * round(width * c / top):<{width}} {c}" for k, c in enumerate(counts)]


def _header(summary: dict[str, Any]) -> str:
    steps = summary["steps"]
    modes = ", ".join(f"{m} {n}" for m, n in summary["modes"].items())
    return (f"{summary['rollouts']} rollouts of {summary['prompts']} prompts over {steps['count']} steps "
            f"({_g(steps['first'])}-{_g(steps['last'])}); modes: {modes or '-'}")


def format_summary(summary: dict[str, Any]) -> str:
    """Terminal text of `summarize_rollouts`: distributions with histograms, reasons, examples."""
    import json

    lines = [summary["path"], _header(summary), "", "total reward: " + _stats_line(summary["reward"]),
             *_bars(summary["reward"])]
    for name, r in summary["rewards"].items():
        total = sum(r["reasons"].values()) or 1
        title = (f"reward {name}  version {', '.join(r['versions'])}  weight {_g(r['weight'])}  "
                 f"infra errors {r['infra_errors']}")
        lines += ["", title, "  score: " + _stats_line(r["score"]), "  reasons:"]
        lines += [f"    {reason:<24} {n:>7}  {100 * n / total:5.1f}%" for reason, n in r["reasons"].items()]
        lines.append("  examples:")
        for reason, examples in r["examples"].items():
            for ex in examples:
                lines.append(f"    {reason}: step {ex['step']}  prompt {ex['prompt_id']}  {ex['mode']}  "
                             f"score {_g(ex['score'])}  {json.dumps(ex['completion'], ensure_ascii=False)}")
    return "\n".join(lines) + "\n"


def _md(text: Any) -> str:
    """One table cell: pipes escaped, newlines shown as ⏎, control characters dropped."""
    text = str(text).replace("|", "\\|").replace("\n", "⏎").replace("`", "'")
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _sparkline(counts: list[int]) -> str:
    top = max(counts) or 1
    return "".join(" ▁▂▃▄▅▆▇█"[round(8 * c / top)] for c in counts)


def summary_markdown(summary: dict[str, Any]) -> str:
    """Markdown of `summarize_rollouts` for Dagster metadata: stats and reason tables, examples."""
    def stats_row(label: str, d: dict[str, Any]) -> str:
        if not d.get("count"):
            return f"| {label} | 0 | - | - | - | - | - | - |"
        q = d["quantiles"]
        return (f"| {label} | {d['count']} | {_g(d['mean'])} | {_g(d['std'])} | {_g(d['min'])} | "
                f"{_g(q['p50'])} | {_g(d['max'])} | {_sparkline(d['histogram']['counts'])} |")

    out = [f"**Rollouts**: {_md(_header(summary))}", "",
           "| score | n | mean | std | min | median | max | histogram (10 bins, min to max) |",
           "|---|---|---|---|---|---|---|---|", stats_row("total (weighted)", summary["reward"])]
    out += [stats_row(f"`{_md(name)}` v{_md(', '.join(r['versions']))}", r["score"])
            for name, r in summary["rewards"].items()]
    for name, r in summary["rewards"].items():
        total = sum(r["reasons"].values()) or 1
        out += ["", f"**`{_md(name)}`** (weight {_g(r['weight'])}, infra errors {r['infra_errors']})", "",
                "| reason | count | share | example (step, prompt, mode, score: completion) |", "|---|---|---|---|"]
        for reason, n in r["reasons"].items():
            ex = "<br>".join(f"{e['step']}, {_md(e['prompt_id'])}, {e['mode']}, {_g(e['score'])}: `{_md(e['completion'])}`"
                             for e in r["examples"].get(reason, []))
            out.append(f"| {_md(reason)} | {n} | {100 * n / total:.1f}% | {ex} |")
    return "\n".join(out) + "\n"


def newest_checkpoint(stage_dir: Path) -> Path | None:
    """The most recently finished checkpoint folder (model + lineage.json) under a stage's folder;
    version folders only (no `.`: not `<version>.partial`, nor a folder set aside as `.unverified-*`)."""
    done = [p for p in stage_dir.iterdir() if p.is_dir() and "." not in p.name and (p / "lineage.json").is_file()
            and (p / "model.safetensors").is_file()] if stage_dir.is_dir() else []
    return max(done, key=lambda p: (p / "lineage.json").stat().st_mtime, default=None)


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """A checkpoint folder, rollouts.parquet file, or stage name (its newest finished folder under
    `$CASCADE_HOME/checkpoints/<stage>/`, the platform's layout)."""
    from spec.paths import cascade_home

    path = Path(name_or_path)
    if path.exists():
        return path
    root = cascade_home() / STAGES_DIR
    found = newest_checkpoint(root / path.name) if path.name == str(name_or_path) else None
    if found is None:
        raise FileNotFoundError(f"{name_or_path}: no such checkpoint folder, nor a stage of that name with a "
                                f"finished checkpoint under {root}")
    return found
