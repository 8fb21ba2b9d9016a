"""Sharded generation through Dagster (`generations[].shards`): the graph-backed asset of N
shard steps and a merge step gives the unsharded asset's output and data version, keeps the row
accounting and names its shard versions in the lineage; the `openai` engine spreads its requests
over two servers (`engine.base_urls`); a shard step killed mid-way regenerates, when rerun,
only the prompts the generation cache does not hold.

Two models: the tiny random model on the `hf` engine (N = 1, 2, 3 on one home: the hf engine
seeds each call, so equal samples come from the cache, which sharding does not key on), and two
OpenAI-compatible stub server processes (tests/generation/openai_stub.py, stopped by PID) whose
samples depend on the request and its seed only, so fresh sharded samples equal unsharded ones.
The kill is the test hook `CASCADE_TEST_KILL_AT=generation_batch:<name>_shard_<k>` (the step
SIGKILLs itself once its first batch is in the cache); requests are counted in the servers' logs.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dagster_project.cli import main
from tests.generation.openai_stub import StubProcess

ROWS, MODES, SAMPLES, BATCH = 12, 2, 2, 2
UPSTREAM = "raw_math_sft,clean_math_sft"


def _recipe(path: Path, shards: int, engine: str, *, model: str = "tiny", max_new_tokens: int = 12) -> Path:
    path.write_text(f"""\
name: generation_shards
seed: 11
model: {{base: tiny}}
execution: {{executor: {"multiprocess" if shards > 1 else "in_process"}}}
sources:
  - {{name: math_sft, domain: math, path: "${{CASCADE_HOME}}/samples/math_sft.jsonl", generate: math_sft, limit: 40}}
generations:
  - name: teacher
    input: math_sft
    use: rejection
    model: {model}
    engine: {engine}
    verify: math
    threshold: 0.0        # keep every well-formed response: drops are format problems and truncation
    samples: {SAMPLES}
    limit: {ROWS}
    shards: {shards}
    batch_rows: {BATCH}
    sampling: {{max_new_tokens: {max_new_tokens}, temperature: 1.0, seed: 3}}
sft_stages:
  - {{name: sft, sources: [math_sft, teacher], max_tokens: 256, train: {{epochs: 1, batch_size: 4, max_steps: 1}}}}
""")
    return path


def _home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))


def _run(recipe: Path, select: str = "teacher") -> int:
    return main(["run", "--recipe", str(recipe), "--select", select])


def _metadata(recipe: Path, name: str = "teacher") -> dict:
    from assets.common import latest_metadata
    from dagster_project.commands import _context, get_instance, resolve_key

    _, defs, _ = _context(str(recipe))
    return latest_metadata(get_instance(), resolve_key(defs, name))


def _check_accounting(meta: dict) -> None:
    assert meta["rows_in"] == meta["rows_out"] + meta["rows_dropped"] == ROWS * MODES * SAMPLES, meta
    assert meta["rows_dropped"] == sum(meta["dropped"].values())
    record = json.loads((Path(meta["path"]) / "lineage.json").read_text())
    assert record["rows_in"] == record["rows_out"] + sum(record["dropped"].values())


def _shard_inputs(meta: dict) -> dict[str, str]:
    record = json.loads((Path(meta["path"]) / "lineage.json").read_text())
    return {i["asset"]: i["data_version"] for i in record["inputs"] if "_shards/" in i["asset"]}


def test_graph_asset_of_shard_steps_with_the_unsharded_key_and_code_version(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from assets import build_definitions
    from dagster_project.recipe import load_recipe

    _home(tmp_path / "home", monkeypatch)

    def asset(shards: int):
        defs = build_definitions(load_recipe(_recipe(tmp_path / f"r{shards}.yaml", shards, "{name: hf}")))
        return next(a for a in defs.assets if "generations/teacher" in {k.to_user_string() for k in getattr(a, "keys", ())})

    plain, sharded = asset(1), asset(3)
    import dagster as dg

    assert isinstance(plain.node_def, dg.OpDefinition) and isinstance(sharded.node_def, dg.GraphDefinition)
    ops = sorted(n.name for n in sharded.node_def.node_defs)
    assert ops == ["generation_teacher_merge", *(f"generation_teacher_shard_{k}" for k in range(3))]
    key = plain.key
    assert sharded.code_versions_by_key[key] == plain.code_versions_by_key[key]  # resharding stales nothing
    assert sharded.metadata_by_key[key]["shards"] == 3 and sharded.metadata_by_key[key]["executor"] == "multiprocess"
    assert {k.to_user_string() for k in sharded.dependency_keys} == {"curated/clean_math_sft"}

    def code(engine: str) -> str:
        defs = build_definitions(load_recipe(_recipe(tmp_path / "openai.yaml", 2, engine)))
        return next(a for a in defs.assets if key in getattr(a, "keys", ())).code_versions_by_key[key]

    one = code("{name: openai, base_url: 'http://a:8000/v1'}")
    assert one == code("{name: openai, base_urls: ['http://b:8000/v1', 'http://c:8000/v1']}")  # replicas: same model
    assert one != code("{name: openai, base_url: 'http://a:8000/v1', options: {api: chat}}")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tiny_model_sharded_equals_unsharded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """N = 2 (fresh samples, multiprocess), then N = 1 and N = 3 on the same home: one output."""
    _home(tmp_path / "home", monkeypatch)
    recipes = {n: _recipe(tmp_path / f"shards{n}.yaml", n, "{name: hf}") for n in (1, 2, 3)}
    assert _run(recipes[1], UPSTREAM) == 0
    assert _run(recipes[2]) == 0
    two = _metadata(recipes[2])
    assert two["generated"] == ROWS * MODES * SAMPLES and two["cached"] == 0
    _check_accounting(two)
    shard_versions = two["shard_versions"]
    assert _shard_inputs(two) == {f"teacher_shards/{k}": v for k, v in shard_versions.items()}
    assert sum(two["shard_rows"].values()) == ROWS and all(n > 0 for n in two["shard_rows"].values())
    for k in range(2):  # each shard dataset: its rows' samples, with their positions in the input
        assert (tmp_path / "home" / "data" / "teacher_shards" / str(k) / shard_versions[str(k)] / "data.parquet").is_file()

    for n in (1, 3):
        assert _run(recipes[n]) == 0
        meta = _metadata(recipes[n])
        assert meta["data_version"] == two["data_version"], n
        assert meta["generated"] == 0 and meta["cached"] == ROWS * MODES * SAMPLES  # the cache ignores sharding
        _check_accounting(meta)
    # Same content, same folder (curation.versioning): the record written first (N = 2) stays.
    assert _shard_inputs(_metadata(recipes[3])) == _shard_inputs(two)


@pytest.fixture
def servers(tmp_path: Path):
    with StubProcess(tmp_path / "a.jsonl") as a, StubProcess(tmp_path / "b.jsonl") as b:
        yield a, b


def _prompts(*servers: StubProcess, skip: tuple[int, ...] = (0, 0)) -> Counter:
    """Prompts the servers were asked for (each request once), after the first `skip[i]` log lines."""
    return Counter(r["prompt"] for s, n in zip(servers, skip) for r in s.requests()[n:])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_base_urls_spread_and_a_killed_shard_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers) -> None:
    a, b = servers  # they serve "tiny" by name (spec.recipe_checks accepts only known model names)
    one = f"{{name: openai, base_url: {json.dumps(a.url)}, api_key_env: ''}}"
    two = (f"{{name: openai, base_urls: [{json.dumps(a.url)}, {json.dumps(b.url)}], api_key_env: '', "
           "options: {concurrency: 2}}")

    # 1. Unsharded, one URL: the reference output and every prompt.
    _home(tmp_path / "one", monkeypatch)
    plain = _recipe(tmp_path / "one.yaml", 1, one, model="tiny", max_new_tokens=50)
    assert _run(plain, UPSTREAM + ",teacher") == 0
    reference = _metadata(plain)
    _check_accounting(reference)
    assert reference["rows_dropped"] > 0 and reference["rows_out"] > 0  # some truncated, some kept
    everything = _prompts(a, b)
    assert len(everything) == ROWS * MODES and set(everything.values()) == {1} and not b.requests()

    # 2. Three shards over two URLs, a fresh cache: the same output, both servers asked.
    _home(tmp_path / "spread", monkeypatch)
    spread = _recipe(tmp_path / "spread.yaml", 3, two, model="tiny", max_new_tokens=50)
    seen = (len(a.requests()), len(b.requests()))
    assert _run(spread, UPSTREAM + ",teacher") == 0
    meta = _metadata(spread)
    assert meta["data_version"] == reference["data_version"] and meta["cached"] == 0
    _check_accounting(meta)
    assert len(a.requests()) > seen[0] and len(b.requests()) > seen[1]
    assert _prompts(a, b, skip=seen) == everything

    # 3. Two shards, shard 1 killed after its first batch; the rerun asks only for the rest.
    home = tmp_path / "killed"
    _home(home, monkeypatch)
    killed = _recipe(tmp_path / "killed.yaml", 2, two, model="tiny", max_new_tokens=50)
    assert _run(killed, UPSTREAM) == 0
    seen = (len(a.requests()), len(b.requests()))
    monkeypatch.setenv("CASCADE_TEST_KILL_AT", "generation_batch:teacher_shard_1")
    assert _run(killed) == 1
    monkeypatch.delenv("CASCADE_TEST_KILL_AT")
    first = _prompts(a, b, skip=seen)
    shard_1 = _shard_prompts(killed, 1)
    done_1 = set(first) & shard_1
    assert len(done_1) == BATCH * MODES and len(shard_1) > len(done_1)  # killed mid-way, one batch cached
    assert set(first) - shard_1 == set(everything) - shard_1  # shard 0 ran to the end beside it
    assert not list((home / "data").glob("teacher/*/data.parquet"))  # no merged output yet

    seen = (len(a.requests()), len(b.requests()))
    assert _run(killed) == 0
    rerun = _prompts(a, b, skip=seen)
    assert rerun == Counter(shard_1 - done_1)  # only the missing prompts, each asked once
    meta = _metadata(killed)
    assert meta["data_version"] == reference["data_version"]
    assert meta["generated"] == sum(rerun.values()) * SAMPLES and meta["cached"] == (ROWS * MODES - len(rerun)) * SAMPLES
    _check_accounting(meta)


def _shard_prompts(recipe: Path, shard: int) -> set[str]:
    """The rendered prompts of one shard's rows (both modes), as the pipeline sends them."""
    import pyarrow.parquet as pq

    from generation.pipeline import default_render
    from generation.shards import shard_rows

    rows = pq.read_table(Path(_metadata(recipe, "clean_math_sft")["path"]) / "data.parquet").slice(0, ROWS)
    part, _ = shard_rows(rows, shard, 2)
    return {default_render(row, mode).text for row in part.to_pylist() for mode in ("think", "no_think")}
