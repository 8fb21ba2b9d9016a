"""`cascade generate`: sample a model on a JSONL of prompts, cached, optionally verified.

    cascade generate --model M --input prompts.jsonl --output out.jsonl --samples K
        [--modes think,no_think] [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S]
        [--engine hf|vllm|openai] [--base-url URL] [--verify REWARD] [--threshold X]
        [--max-per-prompt N] [--keep-all] [--cache DIR] [--reward-cache FILE|off] [--recipe R]

Why here, in the top layer: `--model` may name a checkpoint asset of the recipe, looked up in
the Dagster instance (its latest materialization's folder, checked against its lineage record).
That folder, a built-in model (spec.models: `tiny`, `smollm2`), a model folder or a
`${CASCADE_HOME}/...` path goes through trainer.models.model_folder, the resolver the generation
assets use; with `--engine openai` it is the served model's name. The run itself is
generation.runner's, as in the assets.

Input rows need `prompt` (plus the reward's columns with `--verify`). Output rows are the
input row plus `mode`, `sample`, `response`, `finish_reason`, and with `--verify` `reward`,
`reason`: only responses that pass the rejection rules (generation/filters.py) are written,
unless `--keep-all` (then every response, with a `dropped` column). Samples come from the
generation cache when it has them, so a rerun generates nothing and writes a byte-identical
file. The LAST stdout line is one JSON object: rows, generated, cached, kept, dropped,
data_version (content hash of the output table), model (the folder generated from) and its
model_version, and more. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

HELP = "sample a model on a JSONL of prompts (cached; optional verifier filter)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help=HELP, description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True,
                   help="tiny | smollm2 | a model folder | ${CASCADE_HOME}/... | a checkpoint asset of the recipe | "
                        "the served model (openai)")
    p.add_argument("--input", required=True, help="JSONL rows with `prompt` (and the reward's columns)")
    p.add_argument("--output", required=True, help="JSONL written atomically when the run ends")
    p.add_argument("--samples", type=int, default=1, help="samples per prompt and mode (default 1)")
    p.add_argument("--modes", default="think,no_think", help="comma-separated reasoning modes")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", default="hf", help="generation engine: hf | vllm | openai (default hf)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (engine openai)")
    p.add_argument("--verify", metavar="REWARD", help="score with this reward (registry name or module:attr)")
    p.add_argument("--threshold", type=float, default=1.0, help="a response passes when reward >= this (default 1)")
    p.add_argument("--max-per-prompt", type=int, help="with --verify: keep at most N per prompt and mode")
    p.add_argument("--keep-all", action="store_true", help="with --verify: write dropped responses too")
    p.add_argument("--cache", help="generation cache folder (default $CASCADE_HOME/generation_cache)")
    p.add_argument("--reward-cache", help="reward score cache file (default $CASCADE_HOME/reward_cache.sqlite; off)")
    p.add_argument("--recipe", help="recipe whose checkpoint assets --model may name")
    p.add_argument("--batch-size", type=int, default=32, help="prompts per engine batch (default 32)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=cmd_generate)


def resolve_model(name: str, engine: str = "hf", recipe: str | None = None) -> tuple[str, str]:
    """(what the engine loads, model content version) for `--model`; ValueError when unknown."""
    from generation.runner import served_version
    from spec.models import BUILTIN_MODELS
    from spec.paths import HOME_TOKEN
    from trainer.models import model_folder

    if engine == "openai":
        return name, served_version(name)
    if name in BUILTIN_MODELS or name.startswith(HOME_TOKEN) or Path(name).expanduser().is_dir():
        path, version = model_folder(name)
        return str(path), version
    return _checkpoint_asset(name, recipe)


def _checkpoint_asset(name: str, recipe: str | None) -> tuple[str, str]:
    """The latest folder of checkpoint asset `name`, resolved like any model folder; its data
    version must be the one Dagster recorded and its record must verify, as an asset's upstream."""
    from dagster_project.commands import _context, get_instance, resolve_key
    from spec.lineage_verify import verify_record
    from spec.models import BUILTIN_MODELS
    from trainer.models import model_folder

    hint = f"expected {', '.join(BUILTIN_MODELS)}, a model folder or a checkpoint asset of the recipe"
    _, defs, _ = _context(recipe)
    try:
        key = resolve_key(defs, name)
    except ValueError:
        keys = defs.resolve_asset_graph().get_all_asset_keys()
        known = sorted(k.path[-1] for k in keys if k.path[0] == "checkpoints")
        raise ValueError(f"unknown model {name!r}: {hint} ({', '.join(known)})") from None
    if key.path[0] != "checkpoints":
        raise ValueError(f"--model {name}: asset {key.to_user_string()} is not a checkpoint ({hint})")
    event = get_instance().get_latest_materialization_event(key)
    if event is None or event.asset_materialization is None:
        raise ValueError(f"--model {name}: checkpoint {key.to_user_string()} is not materialized yet "
                         f"(cascade run --select {key.path[-1]})")
    meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    rerun = f"materialize it again (cascade run --select {key.path[-1]})"
    try:  # stored as `${CASCADE_HOME}/checkpoints/...` (spec.paths.portable_path)
        path, version = model_folder(str(meta["path"]))
    except ValueError as err:
        raise ValueError(f"--model {name}: its latest checkpoint is unusable ({err}); {rerun}") from None
    problems = verify_record(path)
    if version != str(meta["data_version"]):
        problems.append(f"its folder's data version is {version}, Dagster recorded {meta['data_version']}")
    if problems:
        raise ValueError(f"--model {name}: {'; '.join(problems)}; {rerun}")
    return str(path), version


def read_jsonl(path: str, needed: tuple[str, ...] = ("prompt",)) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file, lazily; each must be an object with the `needed` columns."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{path}:{lineno}: not JSON ({err})") from None
            missing = [c for c in needed if not isinstance(row, dict) or row.get(c) is None]
            if missing:
                raise ValueError(f"{path}:{lineno}: missing column(s) {missing}")
            yield row


def _count_rows(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def _output_row(judged: Any, verified: bool, keep_all: bool) -> dict[str, Any]:
    rec = judged.record
    row = {**rec.row, "mode": rec.mode, "sample": rec.sample, "response": rec.response,
           "finish_reason": rec.finish_reason}
    if verified:
        result = judged.result
        row |= {"reward": None if result is None else result.score,
                "reason": judged.dropped if result is None else result.reason}
        if keep_all:
            row["dropped"] = judged.dropped
    return row


def _table(rows: list[dict[str, Any]]) -> Any:
    """The output rows as a table for its content hash: every key of every row is a column; a
    column whose values have no common Arrow type is hashed as their JSON text."""
    import pyarrow as pa

    names = list(dict.fromkeys(k for row in rows for k in row))
    columns = {}
    for name in names:
        values = [row.get(name) for row in rows]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            columns[name] = pa.array([json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values])
    return pa.table(columns) if columns else pa.table({})


class _StderrLog:
    """The logger LogProgress needs, writing to stderr."""

    def info(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)


def _write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)  # readers never see half a file


def cmd_generate(args: argparse.Namespace) -> int:
    from curation.chat import MODES
    from curation.content_hash import content_hash
    from generation.engine import Sampling
    from generation.filters import Verifier, judge_records
    from generation.progress import LogProgress, TqdmProgress
    from generation.runner import GenerationJob, run_generation
    from rewards.registry import REWARDS

    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"--modes: {bad or args.modes!r} not in {MODES}")
    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    if not Path(args.input).is_file():
        raise FileNotFoundError(f"--input {args.input}: no such file")
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                        seed=args.seed)
    needed = ("prompt",) + (REWARDS[args.verify].columns if args.verify in REWARDS else ())
    model, model_version = resolve_model(args.model, args.engine, args.recipe)
    job = GenerationJob(args.engine, model, model_version, modes, args.samples, sampling, args.batch_size,
                        {"base_url": args.base_url} if args.base_url else {})
    progress = None
    if not args.no_progress:  # a bar on a terminal, else a plain line every 30 s
        progress = TqdmProgress(file=sys.stderr) if sys.stderr.isatty() else LogProgress(_StderrLog(), every_s=30)
    verifier = Verifier.from_registry(args.verify, args.threshold, reward_cache=args.reward_cache) if args.verify else None
    out: list[dict[str, Any]] = []
    kept, dropped, reasons = 0, {}, {}
    try:
        with run_generation(job, read_jsonl(args.input, needed), args.cache, progress=progress,
                            total=_count_rows(args.input)) as run:
            engine_id, stats = f"{run.engine.name}@{run.engine.version}", run.stats
            for judged in judge_records(run.records, verifier, max_per_prompt=args.max_per_prompt,
                                        checks=verifier is not None):
                if judged.dropped:
                    dropped[judged.dropped] = dropped.get(judged.dropped, 0) + 1
                    if judged.dropped.startswith("verifier_"):  # the verifier's own reason, sub-counted
                        reasons[judged.result.reason] = reasons.get(judged.result.reason, 0) + 1
                else:
                    kept += 1
                if not judged.dropped or args.keep_all:
                    out.append(_output_row(judged, verifier is not None, args.keep_all))
    finally:
        if verifier is not None:
            verifier.close()
    data_version = content_hash(_table(out))
    _write_jsonl(out, Path(args.output))
    summary = {"rows": stats.rows_done, "generated": stats.generated, "cached": stats.cached, "kept": kept,
               "dropped": dict(sorted(dropped.items())), "data_version": data_version, "written": len(out),
               "verifier_reasons": dict(sorted(reasons.items())), "tokens_generated": stats.tokens_generated,
               "model": model, "model_version": model_version, "engine": engine_id, "output": str(args.output)}
    print(json.dumps(summary))
    return 0
