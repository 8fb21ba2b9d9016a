"""Seed sweep: which of a recipe's claims hold in every seed, and how far each stage's gain moves.

One run of the cascade is one draw: the published report of the default recipe (3 of 5 RL
stages learned, no gate failed) did not reproduce on another CPU (issue 34), so a README claim
should be one that holds across draws. This script runs the whole cascade of a recipe once per
seed, each in a fresh `$CASCADE_HOME`, and summarizes the `cascade report` of every run.

What a seed changes: the recipe's top-level `seed`, through `cascade run --set seed=S`
(spec.overrides; recorded in every output's lineage). That seed picks the generated sample data
(sources and held-out eval rows, curation.samples), blend and prompt order, the SFT/RL data
order, the rollout sampling and every stage's torch seed (assets.checkpoints). It does not change
the per-generation `sampling.seed` entries, the base model (SmolLM2's weights are fixed), or the
hardware's numerics (bf16 where the CPU has it: docs/reproducibility.md). So the spread measured
here is the recipe's own variance (data draw + training noise) on this machine; a second machine
adds its numerics on top.

What "holds" means (the words the README may use):
  * a stage's learned claim holds when its `learned` verdict (gain > 0 with paired p < alpha,
    trainer.gates.learned_gate) passed in every seed of the sweep;
  * a stage's no_forgetting claim holds when its gate did not fail (`pass`, or
    `no_earlier_domain` for the first RL stage) in every seed;
  * with a seed missing (not run yet, or its report absent) nothing holds: `complete` is false.
Per RL stage (and own domain) the summary has the gain in points per seed, their mean, min and
max, the p-values and how many seeds learned significantly; per no_forgetting gate its verdict
per seed, the worst domain's drop and p-value, and how many seeds failed; per seed its wall time.

Resuming: each seed's home gets `seed_sweep_run.json` (attempts, exit codes, wall seconds,
machine) and `seed_sweep_report.json` (the `cascade report --json`). A home whose run finished
(exit 0 and report written) is reused as is: nothing runs. Any other home is resumed with
`cascade run --stale`, which materializes only the assets that are missing or stale, so a
killed sweep goes on where it stopped; a seed's wall time is the sum of its attempts.

Settings: --recipe default|proof|PATH (default: default), --seeds (default 1234 5678 9012),
--homes DIR (default $CASCADE_HOME/bench/seed_sweep/<recipe>; one folder per seed), --out FILE
(default <homes>/summary.json), --summary-only (read existing homes, run nothing: the seeds are
the homes found unless --seeds names them). Seeds run one after another (each run uses every core).

Usage: nice -n 19 python benchmarks/seed_sweep.py [--recipe default] [--seeds 1234 5678 9012]
       [--homes DIR] [--out FILE] [--summary-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {"default": ROOT / "recipes" / "default.yaml", "proof": ROOT / "recipes" / "proof.yaml"}
DEFAULT_SEEDS = (1234, 5678, 9012)
RUN_RECORD = "seed_sweep_run.json"
REPORT = "seed_sweep_report.json"
RUN_LOG = "seed_sweep_run.log"
GATE_PASSED = ("pass", "no_earlier_domain")
CASCADE = [sys.executable, "-m", "dagster_project.cli"]


def recipe_file(recipe: str) -> Path:
    """The recipe a name (`default`, `proof`) or a path stands for."""
    path = RECIPES.get(recipe) or Path(recipe)
    if not path.is_file():
        raise SystemExit(f"seed_sweep: no recipe {recipe!r} (default, proof or a YAML path)")
    return path.resolve()


def default_homes(recipe: str) -> Path:
    from spec.paths import cascade_home

    return cascade_home() / "bench" / "seed_sweep" / (recipe if recipe in RECIPES else Path(recipe).stem)


def machine() -> dict[str, Any]:
    """What decides this machine's numerics: CPU model, cores and the bf16 flags `dtype: auto` reads."""
    info: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), None)
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    info["cpu"] = model
    info["flags"] = {f: f in flags for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile")}
    return info


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def finished(home: Path) -> bool:
    """A home whose run exited 0 and whose report was written: reused, never rerun."""
    record = _read_json(home / RUN_RECORD) or {}
    return bool(record.get("finished")) and (home / REPORT).is_file()


def _cascade(args: list[str], home: Path, log: Path) -> int:
    """One `cascade` command on `home`, its output appended to the home's log; the exit code."""
    env = {**os.environ, "CASCADE_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("DAGSTER_HOME", None)  # the instance must be the seed's own ($CASCADE_HOME/dagster)
    with log.open("a") as out:
        out.write(f"\n$ cascade {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen(CASCADE + args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            return proc.wait()
        except BaseException:  # the sweep is stopped: stop its run too, so the home's lock is free to resume
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


def write_report(recipe: Path, seed: int, home: Path) -> bool:
    """`cascade report --json` of a home into its REPORT file; whether it was written."""
    args = ["report", "--recipe", str(recipe), "--set", f"seed={seed}", "--json", str(home / REPORT)]
    return _cascade(args, home, home / RUN_LOG) == 0 and (home / REPORT).is_file()


def run_seed(recipe: Path, seed: int, home: Path) -> dict[str, Any]:
    """Run (or resume) the cascade of `recipe` with `seed` in `home`; its run record."""
    record = _read_json(home / RUN_RECORD) or {"seed": seed, "recipe": str(recipe), "attempts": []}
    if finished(home):
        return {**record, "reused": True}
    home.mkdir(parents=True, exist_ok=True)
    (home / REPORT).unlink(missing_ok=True)  # an earlier attempt's report must not stand for this one's
    start = time.time()
    print(f"seed_sweep: seed {seed}: cascade run in {home} (log: {home / RUN_LOG})", file=sys.stderr, flush=True)
    code = _cascade(["run", "--stale", "--recipe", str(recipe), "--set", f"seed={seed}"], home, home / RUN_LOG)
    wall = round(time.time() - start, 1)
    reported = write_report(recipe, seed, home)
    record["attempts"].append({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)), "wall_s": wall,
                               "run_exit": code, "reported": reported, "machine": machine()})
    record["finished"] = code == 0 and reported
    (home / RUN_RECORD).write_text(json.dumps(record, indent=2))
    print(f"seed_sweep: seed {seed}: exit {code} after {wall:.0f} s", file=sys.stderr, flush=True)
    return {**record, "reused": False}


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(statistics.fmean(values), 2), "min": min(values), "max": max(values)}


def _learned_rows(entry: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """{own domain: learned verdict} of a report's stage entry (one per domain of a multi-domain stage)."""
    by = entry["gates"].get("learned_by_domain")
    if by:
        return dict(by)
    verdict = entry["gates"].get("learned") or {}
    return {str(entry.get("own_domain") or verdict.get("domain")): verdict}


def summarize(reports: Mapping[int, Mapping[str, Any] | None], runs: Mapping[int, Mapping[str, Any]],
              seeds: Sequence[int]) -> dict[str, Any]:
    """The sweep's summary from each seed's `cascade report` (None: not reported) and run record."""
    keys = [str(s) for s in seeds]
    done = {str(s): r for s, r in reports.items() if r is not None and s in seeds}
    complete = len(done) == len(keys)
    stages: dict[str, dict[str, Any]] = {}
    gates: dict[str, dict[str, Any]] = {}
    order = [e["stage"] for r in done.values() for e in r["stages"] if "own_domain" in e]
    for name in dict.fromkeys(order):  # RL stages (those with own domains), in cascade order
        stage: dict[str, Any] = {"by_domain": {}, "learned": {}}
        gate: dict[str, Any] = {"status": {}, "worst": {}}
        for seed in keys:
            entry = next((e for e in done[seed]["stages"] if e["stage"] == name), None) if seed in done else None
            if entry is None:
                continue
            for domain, g in _learned_rows(entry).items():
                row = stage["by_domain"].setdefault(domain, {"gain": {}, "p_value": {}, "status": {}})
                row["gain"][seed], row["p_value"][seed] = g.get("gain"), g.get("p_value")
                row["status"][seed] = g.get("status", "missing")
            stage["learned"][seed] = bool((entry["gates"].get("learned") or {}).get("passed"))
            nf = entry["gates"].get("no_forgetting") or {}
            gate["status"][seed] = nf.get("status", "missing")
            scored = [r for r in nf.get("domains", []) if r.get("status") != "missing"]
            if scored:
                worst = min(scored, key=lambda r: r["margin"])
                gate["worst"][seed] = {k: worst.get(k) for k in ("domain", "drop", "p_value", "best")}
        for row in stage["by_domain"].values():
            row.update(_stats([v for v in row["gain"].values() if v is not None]))
            row["learned_seeds"] = sum(s == "learned" for s in row["status"].values())
        stage["learned_seeds"] = sum(stage["learned"].values())
        stage["holds"] = complete and stage["learned_seeds"] == len(keys)
        gate["failed_seeds"] = sum(s == "fail" for s in gate["status"].values())
        gate["passed_seeds"] = sum(s in GATE_PASSED for s in gate["status"].values())
        gate["holds"] = complete and gate["passed_seeds"] == len(keys)
        stages[name], gates[name] = stage, gate
    walls = {str(s): {"wall_s": round(sum(a["wall_s"] for a in runs[s].get("attempts", [])), 1),
                      "attempts": len(runs[s].get("attempts", [])), "finished": bool(runs[s].get("finished")),
                      "reused": bool(runs[s].get("reused"))} for s in seeds if s in runs}
    return {"seeds": list(seeds), "reported_seeds": [int(s) for s in done], "complete": complete,
            "alpha": next((r.get("alpha") for r in done.values()), None), "rl_stages": stages,
            "no_forgetting": gates, "runs": walls}


def claims(summary: Mapping[str, Any]) -> list[str]:
    """One sentence per RL stage and gate, in the words the README may use (only `holds` ones are claims)."""
    n, out = len(summary["seeds"]), []
    for name, stage in summary["rl_stages"].items():
        for domain, row in stage["by_domain"].items():
            gains = ", ".join("–" if row["gain"].get(str(s)) is None else f"{row['gain'][str(s)]:+.1f}"
                              for s in summary["seeds"])
            out.append(f"{name} learns {domain} significantly in {row['learned_seeds']}/{n} seeds "
                       f"(gain per seed {gains}; mean {_pts(row['mean'])})")
    for name, gate in summary["no_forgetting"].items():
        fails = [f"seed {s}: {w['domain']} {-w['drop']:+.1f}, p={w['p_value']:.2g}"
                 for s, w in gate["worst"].items() if gate["status"].get(s) == "fail"]
        out.append(f"{name} no_forgetting passes in {gate['passed_seeds']}/{n} seeds, fails in {gate['failed_seeds']}"
                   + (f" ({'; '.join(fails)})" if fails else ""))
    return out


def _pts(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}"


def render(summary: Mapping[str, Any]) -> str:
    """The summary as a terminal table: a row per RL stage domain, a column per seed."""
    seeds = [str(s) for s in summary["seeds"]]
    head = ["stage", "domain", *(f"gain@{s}" for s in seeds), "mean", "min..max", "learned", "no_forgetting"]
    rows = [head]
    for name, stage in summary["rl_stages"].items():
        gate = summary["no_forgetting"][name]
        for domain, row in stage["by_domain"].items():
            cells = [f"{_pts(row['gain'].get(s))}{'*' if row['status'].get(s) == 'learned' else ''}" for s in seeds]
            rows.append([name, domain, *cells, _pts(row["mean"]), f"{_pts(row['min'])}..{_pts(row['max'])}",
                         f"{row['learned_seeds']}/{len(seeds)}", f"{gate['failed_seeds']}/{len(seeds)} failed"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    lines.append(f"(* = learned significantly, alpha {summary['alpha']}; gains in points over the stage's input)")
    for seed, run in summary["runs"].items():
        lines.append(f"seed {seed}: {run['wall_s']:.0f} s in {run['attempts']} attempt(s)"
                     f"{', reused' if run['reused'] else ''}{'' if run['finished'] else ', NOT finished'}")
    if not summary["complete"]:
        missing = sorted(set(summary["seeds"]) - set(summary["reported_seeds"]))
        lines.append(f"incomplete: no report for seed(s) {missing}: no claim holds yet")
    lines += ["", "Claims:"] + [f"  {c}" for c in claims(summary)]
    return "\n".join(lines)


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def found_seeds(homes: Path) -> list[int]:
    return sorted(int(p.name) for p in homes.iterdir() if p.is_dir() and p.name.isdigit()) if homes.is_dir() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="default", help="default, proof or a recipe YAML path")
    parser.add_argument("--seeds", type=int, nargs="+", help=f"default {' '.join(map(str, DEFAULT_SEEDS))}")
    parser.add_argument("--homes", type=Path, help="one CASCADE_HOME per seed under it "
                        "(default $CASCADE_HOME/bench/seed_sweep/<recipe>)")
    parser.add_argument("--out", type=Path, help="summary JSON (default <homes>/summary.json)")
    parser.add_argument("--summary-only", action="store_true", help="read the existing homes; run nothing")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)  # `kill PID` stops the running cascade too (see _cascade)
    sys.path.insert(0, str(ROOT))
    recipe = recipe_file(args.recipe)
    homes = (args.homes or default_homes(args.recipe)).resolve()
    seeds = args.seeds or (found_seeds(homes) if args.summary_only else list(DEFAULT_SEEDS))
    if not seeds:
        raise SystemExit(f"seed_sweep: no seed homes under {homes}")
    runs, reports = {}, {}
    for seed in seeds:
        home = homes / str(seed)
        if args.summary_only:
            runs[seed] = {**(_read_json(home / RUN_RECORD) or {}), "reused": True}
            if home.is_dir() and not (home / REPORT).is_file() and (home / "dagster").is_dir():
                write_report(recipe, seed, home)  # a home run by hand: its report is read, nothing trains
        else:
            runs[seed] = run_seed(recipe, seed, home)
        reports[seed] = _read_json(home / REPORT)
    summary = {"recipe": str(recipe.relative_to(ROOT) if recipe.is_relative_to(ROOT) else recipe),
               "homes": str(homes), "machine": machine(), **summarize(reports, runs, seeds)}
    print(render(summary))
    out = args.out or homes / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
