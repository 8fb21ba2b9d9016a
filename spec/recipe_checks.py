"""Checks across a recipe's blocks, collected so one message names every bad field at once.

Field types, ranges and unknown keys are pydantic's (spec.recipe's typed models). What a
single field cannot know is checked here, on the raw mapping the YAML gave, so the checks run
even when some field is malformed and their findings join pydantic's in one error:

* names: sources and generations (one namespace: stages list both in `sources:`), benchmarks
  and stages are unique;
* generations: the input is a source; a teacher that is a checkpoint of this recipe is trained
  before every stage that uses the generation's output (the graph stays a DAG);
* references: every stage source exists and has a domain the stage's kind takes; a stage whose
  rewards need the reward model has one declared;
* order: RL stages follow the cascade (RLHF → IF → math → code → SWE, each kind's
  `cascade_position`), or the Cascade 2 order with `stage_order: cascade2` (spec.kinds.STAGE_ORDERS),
  unless the recipe sets `stage_order: custom`;
* stage options: each RL stage's `options:` checked by its kind's options model against the rest of
  the recipe (a MOPD stage's teachers are earlier checkpoints serving domains it takes);
* evals: a `tts:` plan sits on an eval set, `verifier` on the code set, `rm` with a reward model;
* files: a source or benchmark path without a `generate:` fallback exists and holds data (not an
  empty file or folder, unless the source sets `min_rows: 0`), a source's reader can be told from
  its file name when `reader` is `auto` (`data.txt` needs `reader:`), and a `model.base` that is a
  folder rather than a built-in model exists.

Each finding is `field.path: message`, the same shape as pydantic's lines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

from spec.data import AUTO_READER_SUFFIXES, HF_FOLDER_MARKERS, LEGACY_READER_FORMATS
from spec.kinds import STAGE_ORDERS, UnknownStageKindError, stage_kind, stage_kinds
from spec.models import BUILTIN_MODELS
from spec.paths import REPO_ROOT, cascade_home
from spec.train import StagePlace

def resolve_path(path: str, recipe_path: Path | None) -> Path:
    """Expand `${CASCADE_HOME}` and `~`; a relative path resolves against the recipe's folder."""
    p = Path(os.path.expanduser(path.replace("${CASCADE_HOME}", str(cascade_home()))))
    if not p.is_absolute():
        p = (recipe_path.parent if recipe_path else REPO_ROOT) / p
    return p


def _entries(data: dict, section: str) -> Iterator[tuple[int, dict]]:
    value = data.get(section)
    for i, item in enumerate(value if isinstance(value, list) else []):
        if isinstance(item, dict):
            yield i, item


def _names(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _duplicates(named: list[tuple[str, Any]]) -> list[str]:
    seen: set[Any] = set()
    out = []
    for where, name in named:
        if isinstance(name, str) and name in seen:
            out.append(f"{where}: name {name!r} is used twice")
        seen.add(name)
    return out


def _kind(name: Any):
    try:
        return stage_kind(name) if isinstance(name, str) else None
    except UnknownStageKindError:
        return None


def _stage_sources(data: dict) -> Iterator[tuple[str, list[str], tuple[str, ...]]]:
    """(field path, source names, domains the stage takes) of every stage."""
    for i, stage in _entries(data, "sft_stages"):
        yield f"sft_stages.{i}.sources", _names(stage.get("sources")), stage_kind("sft").source_domains
    rm = data.get("reward_model")
    if isinstance(rm, dict):
        yield "reward_model.sources", _names(rm.get("sources")), stage_kind("reward_model").source_domains
    for i, stage in _entries(data, "rl_stages"):
        kind = _kind(stage.get("kind"))
        if kind is not None:
            yield f"rl_stages.{i}.sources", _names(stage.get("sources")), kind.source_domains


def _sources_and_generations(data: dict) -> dict[Any, dict]:
    """What a stage may list in `sources:`: sources, and generations (with their input's domain)."""
    sources = {s.get("name"): s for _, s in _entries(data, "sources")}
    for _, gen in _entries(data, "generations"):
        origin = sources.get(gen.get("input"), {})
        sources.setdefault(gen.get("name"), {"domain": origin.get("domain"), "generation": gen})
    return sources


def _generation_problems(data: dict, recipe_path: Path | None) -> list[str]:
    """Inputs exist; a teacher checkpoint is an earlier stage than every stage using its output."""
    sources = {s.get("name") for _, s in _entries(data, "sources")}
    chain = [s.get("name") for _, s in _entries(data, "sft_stages")] + [s.get("name") for _, s in _entries(data, "rl_stages")]
    users = {}
    for section in ("sft_stages", "rl_stages"):
        for _, stage in _entries(data, section):
            for ref in _names(stage.get("sources")):
                users.setdefault(ref, []).append(stage.get("name"))
    out = []
    for i, gen in _entries(data, "generations"):
        if gen.get("input") not in sources:
            out.append(f"generations.{i}.input: unknown source {gen.get('input')!r} (known: {sorted(n for n in sources if isinstance(n, str))})")
        model, name = gen.get("model"), gen.get("name")
        if isinstance(model, str) and model in chain:
            late = [u for u in users.get(name, []) if u in chain and chain.index(u) <= chain.index(model)]
            if late:
                out.append(f"generations.{i}.model: teacher {model!r} is trained after (or by) {late[0]!r}, "
                           "which uses this generation: the graph would have a cycle")
        elif (isinstance(model, str) and model not in BUILTIN_MODELS and not resolve_path(model, recipe_path).is_dir()
              and (gen.get("engine") or {}).get("name") != "openai"):  # an endpoint's model is only a served name
            out.append(f"generations.{i}.model: {model!r} is not a stage of this recipe, a built-in model "
                       f"({', '.join(BUILTIN_MODELS)}) or a model folder")
        elif model is None and gen.get("use") == "pass_rate":
            rl_users = [u for _, s in _entries(data, "rl_stages") if name in _names(s.get("sources")) for u in [s.get("name")]]
            if not rl_users:
                out.append(f"generations.{i}.model: no RL stage uses this pass_rate generation, so it has no "
                           "input checkpoint to default to; name a model")
    return out


def _reference_problems(data: dict) -> list[str]:
    sources = _sources_and_generations(data)
    out = []
    for where, refs, domains in _stage_sources(data):
        for j, ref in enumerate(refs):
            if ref not in sources:
                out.append(f"{where}.{j}: unknown source {ref!r} (known: {sorted(n for n in sources if isinstance(n, str))})")
            elif sources[ref].get("domain") not in domains:
                out.append(f"{where}.{j}: source {ref!r} has domain {sources[ref].get('domain')!r}; "
                           f"this stage takes {sorted(domains)}")
    return out


def _reward_names(stage: dict) -> list[str]:
    rewards = stage.get("rewards")
    if not rewards:
        kind = _kind(stage.get("kind"))
        return list(kind.default_rewards) if kind else []
    names = [r if isinstance(r, str) else r.get("name") for r in rewards if isinstance(r, (str, dict))]
    return [n for n in names if isinstance(n, str)]


def _reward_model_problems(data: dict, needs_reward_model: Callable[[str], bool] | None) -> list[str]:
    if needs_reward_model is None or data.get("reward_model"):
        return []
    out = []
    for i, stage in _entries(data, "rl_stages"):
        for name in _reward_names(stage):
            try:
                needed = needs_reward_model(name)
            except Exception:  # noqa: BLE001 - an unknown reward is reported by its own field
                needed = False
            if needed:
                out.append(f"rl_stages.{i}.rewards: reward {name!r} scores with the reward model, "
                           "but `reward_model` is not declared")
    return out


def _order_problems(data: dict) -> list[str]:
    name = data.get("stage_order", "cascade")
    if name == "cascade":
        kinds = sorted((k for k in stage_kinds("rl") if k.cascade_position), key=lambda k: k.cascade_position or 0)
        position = {k.name: k.cascade_position for k in kinds}
    elif name in STAGE_ORDERS:
        position = {k: i for i, k in enumerate(STAGE_ORDERS[name])}
    else:
        return []
    order = " → ".join(sorted(position, key=lambda k: position[k]))
    out, latest = [], None
    for i, stage in _entries(data, "rl_stages"):
        kind = _kind(stage.get("kind"))
        if kind is None or position.get(kind.name) is None:
            continue
        if latest is not None and position[kind.name] < position[latest[1]]:
            out.append(f"rl_stages.{i}.kind: {kind.name!r} stage {stage.get('name')!r} comes after "
                       f"{latest[1]!r} stage {latest[0]!r}, against the {name} order ({order}); "
                       "reorder the stages or set `stage_order: custom`")
        else:
            latest = (stage.get("name"), kind.name)
    return out


def _options_problems(data: dict) -> list[str]:
    """Each RL stage's `options:` against the rest of the recipe, through its kind's options model
    (spec.train.StageOptions.problems: e.g. MOPD teachers must be earlier checkpoints). Options that
    do not validate are reported by the model validation, not again here."""
    chain = ["base_model"] + [str(s.get("name")) for _, s in _entries(data, "sft_stages")]
    stages = list(_entries(data, "rl_stages"))
    out = []
    for n, (i, stage) in enumerate(stages):
        kind = _kind(stage.get("kind"))
        options = stage.get("options")
        if kind is not None and kind.options is not None and isinstance(options, dict):
            try:
                model = kind.options.model_validate(options)
            except ValueError:
                model = None
            if model is not None:
                place = StagePlace(str(stage.get("name")), kind.name, kind.source_domains, tuple(chain),
                                   tuple(str(s.get("name")) for _, s in stages[n + 1:]))
                out += [f"rl_stages.{i}.options.{problem}" for problem in model.problems(place)]
        chain.append(str(stage.get("name")))
    return out


def _tts_problems(data: dict) -> list[str]:
    """`tts:` on an eval set: `verifier` needs rows with tests (the code domain), `rm` a reward model."""
    out = []
    for i, bench in _entries(data, "benchmarks"):
        tts = bench.get("tts")
        if not isinstance(tts, dict):
            continue
        where = f"benchmarks.{i}.tts"
        if not bench.get("eval_domain"):
            out.append(f"{where}: test-time scaling needs an eval set (`eval_domain`)")
        if tts.get("select") == "verifier" and bench.get("eval_domain") != "code":
            out.append(f"{where}.select: `verifier` runs the row's visible tests; only the code eval set has tests")
        if tts.get("select") == "rm" and not data.get("reward_model"):
            out.append(f"{where}.select: `rm` ranks samples with the reward model, but `reward_model` is not declared")
    return out


def _data_problem(item: dict, path: Path, section: str) -> str | None:
    """What makes an existing file or folder unreadable as the entry says, found without reading
    it: a name `reader: auto` cannot read, an empty file or folder (a source with `min_rows: 0` may be empty)."""
    reader = item.get("format") if item.get("format") in LEGACY_READER_FORMATS else item.get("reader", "auto")
    may_be_empty = section == "sources" and item.get("min_rows") == 0
    if path.is_dir():
        files = [f for f in path.rglob("*") if f.is_file() and not f.name.startswith(".")]
        if not files:
            return None if may_be_empty else f"{path} is an empty folder: it holds no data"
        if section == "sources" and reader == "auto" and not any((path / m).exists() for m in HF_FOLDER_MARKERS) \
                and not any(f.name.endswith(".parquet") for f in files):
            return f"{path} is neither a `datasets` folder nor parquet files: set `reader` (the file type)"
        return None
    name = path.name.lower()
    if section == "sources" and reader == "auto" and not name.endswith(tuple(AUTO_READER_SUFFIXES)):
        return (f"cannot tell the reader from the name {path.name!r} (auto reads "
                f"{', '.join(AUTO_READER_SUFFIXES)}): set `reader` (the file type, e.g. `reader: jsonl`)")
    if path.stat().st_size == 0 and not may_be_empty:
        return f"{path} is empty (0 bytes): it holds no rows" + (
            " (set `min_rows: 0` if an empty source is expected)" if section == "sources" else "")
    return None


def _file_problems(data: dict, recipe_path: Path | None) -> list[str]:
    out = []
    for section in ("sources", "benchmarks"):
        for i, item in _entries(data, section):
            path = item.get("path")
            if not isinstance(path, str) or item.get("generate"):
                continue
            hub = item.get("reader", item.get("format")) == "hf" and not path.startswith((".", "/", "~", "$"))
            if hub:
                continue
            resolved = resolve_path(path, recipe_path)
            if not resolved.exists():
                out.append(f"{section}.{i}.path: not found: {resolved} (and no `generate:` to write it)")
                continue
            problem = _data_problem(item, resolved, section)
            if problem:
                out.append(f"{section}.{i}.{'reader' if problem.startswith('cannot tell') else 'path'}: {problem}")
    model = data.get("model")
    base = model.get("base") if isinstance(model, dict) else None
    if isinstance(base, str) and base not in BUILTIN_MODELS and not resolve_path(base, recipe_path).is_dir():
        out.append(f"model.base: {base!r} is neither a built-in model ({', '.join(BUILTIN_MODELS)}) "
                   f"nor a model folder ({resolve_path(base, recipe_path)} does not exist)")
    return out


def recipe_problems(data: dict, recipe_path: Path | None = None,
                    needs_reward_model: Callable[[str], bool] | None = None) -> list[str]:
    """Every cross-block problem of a raw recipe mapping, as `field.path: message` lines."""
    named = [(f"sources.{i}.name", s.get("name")) for i, s in _entries(data, "sources")]
    named += [(f"generations.{i}.name", g.get("name")) for i, g in _entries(data, "generations")]
    benches = [(f"benchmarks.{i}.name", b.get("name")) for i, b in _entries(data, "benchmarks")]
    stages = [(f"sft_stages.{i}.name", s.get("name")) for i, s in _entries(data, "sft_stages")]
    if isinstance(data.get("reward_model"), dict):
        stages.append(("reward_model.name", data["reward_model"].get("name", "reward_model")))
    stages += [(f"rl_stages.{i}.name", s.get("name")) for i, s in _entries(data, "rl_stages")]
    return (_duplicates(named) + _duplicates(benches) + _duplicates(stages) + _reference_problems(data)
            + _reward_model_problems(data, needs_reward_model) + _order_problems(data) + _options_problems(data)
            + _generation_problems(data, recipe_path) + _tts_problems(data) + _file_problems(data, recipe_path))
