"""Sharded curation equals unsharded curation: same rows, same data version.

First the library (curation.shards against load_source + decontaminate_table + dedup) on a
corpus with exact and near duplicates, contaminated rows and quarantined lines, for several
shard counts; then the Dagster graph: the tiny recipe with every source sharded, run through
the multiprocess executor, against the same recipe unsharded in process.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.content_hash import content_hash
from curation.decontam import decontaminate_table
from curation.decontam_index import BenchmarkIndex
from curation.dedup import dedup
from curation.dedup_params import DedupParams
from curation.samples import generate
from curation.dedup_stages import cluster
from curation.schemas import DOMAIN_SCHEMAS
from curation.shards import (
    ORDINAL, ShardTexts, assemble, confirm_partition, curate_shard, decontam_report, write_shard_rows,
)
from curation.sources import load_source
from curation.versioning import write_versioned_batches

ROOT = Path(__file__).resolve().parents[2]
LEAK = "natalia sold clips to forty eight of her friends in april and then she sold half as many clips in may"


def _corpus(path: Path) -> Path:
    """Sample chat rows plus exact duplicates (case/spacing), near duplicates, benchmark leaks and bad lines."""
    generate("chat_sft", path)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")]
    rng = random.Random(0)
    extra: list[str] = []
    for row in rng.sample(rows, 20):
        extra.append(json.dumps({**row, "prompt": "  " + row["prompt"].upper() + " "}))  # exact after normalisation
    for row in rng.sample(rows, 20):
        words = (row["prompt"] + " and please explain each step of the answer in detail for a beginner who has never"
                 " seen this kind of problem before so that they can follow every single part of the reasoning").split()
        near = words[:-1] + ["carefully"]
        extra.append(json.dumps({**row, "prompt": " ".join(words)}))
        extra.append(json.dumps({**row, "prompt": " ".join(near)}))
    for row in rng.sample(rows, 5):
        extra.append(json.dumps({**row, "prompt": f"Question: {LEAK.capitalize()}. How many?"}))
    extra += ["{not json", "", json.dumps({"prompt": ""}), "\n"]
    lines = path.read_text().splitlines() + extra
    rng.shuffle(lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def _unsharded(path: Path, index: BenchmarkIndex, params: DedupParams):
    loaded = load_source(path, "auto", "chat", "chat_sft")
    kept, hits = decontaminate_table(loaded.table, index, None)
    result = dedup([kept], params)
    return loaded, hits, result


def _sharded(path: Path, shards: int, index: BenchmarkIndex, params: DedupParams, out: Path):
    """Every stage of the sharded path, each result through parquet on disk as the Dagster steps do."""
    folders = []
    for k in range(shards):
        shard = curate_shard(path, {"name": "chat_sft"}, "chat", k, shards, index, lambda schema: None, params,
                             partitions=shards)
        folder = out / f"shard_{k}"
        folder.mkdir(parents=True)
        write_shard_rows(shard.table, folder / "data.parquet")
        pq.write_table(shard.load.quarantine, folder / "quarantine.parquet")
        ordinals = shard.load.table.column(ORDINAL).to_pylist()
        (folder / "decontam_dropped.json").write_text(json.dumps(
            [h.as_report() | {"field": h.field, "ordinal": ordinals[h.row]} for h in shard.hits]))
        for j, keys in enumerate(shard.keys):
            pq.write_table(keys, folder / f"keys_{j}.parquet")
        folders.append(folder)
    texts = ShardTexts({k: f / "data.parquet" for k, f in enumerate(folders)}, None)
    edges = [confirm_partition([pq.read_table(f / f"keys_{j}.parquet") for f in folders], texts, params)
             for j in range(shards)]
    removed = cluster(edges)
    batches = list(assemble([f / "data.parquet" for f in folders], removed, batch_rows=64))
    table = pa.Table.from_batches(batches, schema=DOMAIN_SCHEMAS["chat"])
    quarantine = pa.concat_tables([pq.read_table(f / "quarantine.parquet") for f in folders]).sort_by("line").drop_columns([ORDINAL])
    report = decontam_report(folders)
    return table, removed, quarantine, [r["row"] for r in report]


@pytest.mark.parametrize("shards", [1, 2, 3, 7])
def test_sharded_library_equals_unsharded(tmp_path: Path, shards: int) -> None:
    path = _corpus(tmp_path / "chat.jsonl")
    index = BenchmarkIndex.build({"gsm8k": pa.table({"question": [LEAK]})}, n=9)
    params = DedupParams()
    loaded, hits, expected = _unsharded(path, index, params)
    reasons = expected.dropped_counts(0)
    assert reasons.get("exact_duplicate", 0) >= 20 and reasons.get("near_duplicate", 0) >= 10, reasons
    assert len(hits) == 5 and loaded.quarantine.num_rows >= 2

    table, removed, quarantine, hit_rows = _sharded(path, shards, index, params, tmp_path / "out")
    assert content_hash(table) == content_hash(expected.tables[0])
    assert table.equals(expected.tables[0])
    _same_removals(removed, expected)
    assert quarantine.equals(loaded.quarantine)
    assert hit_rows == sorted(h.row for h in hits)
    written = tmp_path / "written"
    out = write_versioned_batches(iter(table.to_batches(max_chunksize=50)), table.schema, written, "clean", rows_in=table.num_rows,
                                  dropped={}, inputs=[], code_version="c", config={})
    assert out.data_version == content_hash(expected.tables[0])  # the streamed version is the in-memory one


def _same_removals(removed: pa.Table, expected) -> None:
    got = removed.select(["row_id", "reason", "duplicate_of"]).to_pylist()
    want = expected.dropped.select(["row_id", "reason", "duplicate_of"]).to_pylist()
    assert sorted(got, key=str) == sorted(want, key=str)


def test_near_dup_off_and_exact_off(tmp_path: Path) -> None:
    path = _corpus(tmp_path / "chat.jsonl")
    index = BenchmarkIndex.build({"gsm8k": pa.table({"question": [LEAK]})}, n=9)
    for params in (DedupParams.from_dict({"exact": False}), DedupParams.from_dict({"near": {"enabled": False}})):
        _, _, expected = _unsharded(path, index, params)
        table, removed, _, _ = _sharded(path, 3, index, params, tmp_path / f"out_{params.exact}")
        assert content_hash(table) == content_hash(expected.tables[0])
        _same_removals(removed, expected)


SOURCES = ["chat_sft", "code_prompts"]
BENCHES = ["humaneval", "gsm8k", "eval_math", "eval_ifeval", "eval_code", "eval_swe", "eval_chat"]


def _run(home: Path, monkeypatch: pytest.MonkeyPatch, capsys, shards: int, executor: str) -> dict[str, str]:
    """Materialize the tiny recipe's curated sources; {asset: data_version} of every clean_* asset."""
    from dagster_project.cli import main

    monkeypatch.setenv("CASCADE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    sets = ["--set", f"execution.executor={executor}"]
    raw = []
    for s in SOURCES:
        if shards > 1:
            sets += ["--set", f"sources.{s}.shards={shards}"]
        else:
            raw.append(f"raw_{s}")
    recipe = str(ROOT / "recipes" / "tiny.yaml")
    benches = ",".join(f"bench_{b}" for b in BENCHES)  # in process first: fewer step processes below
    assert main(["run", "--recipe", recipe, "--select", benches, *sets, "--set", "execution.executor=in_process"]) == 0
    capsys.readouterr()
    assert main(["run", "--recipe", recipe, "--select", ",".join([*raw, *(f"clean_{s}" for s in SOURCES)]), *sets]) == 0
    out = capsys.readouterr().out
    assert f"executor: {executor}" in out
    assert main(["status", "--recipe", recipe, "--json", *sets]) == 0
    rows = json.loads(capsys.readouterr().out)
    versions = {r["asset"]: r["data_version"] for r in rows if r["asset"] in {f"clean_{s}" for s in SOURCES}}
    assert len(versions) == len(SOURCES) and all(versions.values()), versions
    return versions


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sharded_tiny_recipe_same_data_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The tiny recipe's sources in 3 shards under the multiprocess executor = unsharded in process."""
    unsharded = _run(tmp_path / "plain", monkeypatch, capsys, 1, "in_process")
    sharded = _run(tmp_path / "sharded", monkeypatch, capsys, 3, "multiprocess")  # 6 shard steps, 2 merges
    assert sharded == unsharded
    shard_dirs = sorted((tmp_path / "sharded" / "data" / "clean_chat_sft_shards").iterdir())
    assert [d.name for d in shard_dirs] == ["0", "1", "2"]
    assert not (tmp_path / "sharded" / "data" / "raw_chat_sft").exists()  # the shards read the file themselves


def test_executor_from_recipe_and_k8s_config_validated() -> None:
    """The recipe's `execution:` block picks the job's executor; a bad k8s config fails at load."""
    import dagster as dg

    from assets import MAIN_JOB, build_definitions
    from dagster_project.recipe import load_recipe

    def executor(*sets: str) -> str:
        return build_definitions(load_recipe(ROOT / "recipes" / "tiny.yaml", overrides=sets)).resolve_job_def(MAIN_JOB).executor_def.name

    assert executor() == "in_process"  # auto, nothing sharded: no per-step process start-up
    assert executor("sources.chat_sft.shards=2") == "multiprocess"  # auto with a sharded source
    assert executor("execution.executor=multiprocess", "execution.max_concurrent=2") == "multiprocess"
    pytest.importorskip("dagster_k8s", reason="dagster-k8s not installed (make celery)")
    example = _docs_k8s_example()
    assert executor("execution.executor=k8s", f"execution.k8s={json.dumps(example)}") == "k8s"
    with pytest.raises(dg.DagsterInvalidConfigError):
        executor("execution.executor=k8s", 'execution.k8s={"job_namespace": 3, "no_such_key": true}')


def _docs_k8s_example() -> dict:
    """The `execution.k8s` block of the documented example recipe (docs/executors.md)."""
    import yaml

    text = (ROOT / "docs" / "executors.md").read_text()
    block = text.split("```yaml k8s")[1].split("```")[0]
    return yaml.safe_load(block)["execution"]["k8s"]


def test_assemble_with_nothing_removed_and_with_an_empty_shard(tmp_path: Path) -> None:
    """Edge cases of the streamed assembly: no duplicates at all, and a shard without rows."""
    from curation.dedup_stages import REMOVED_SCHEMA

    rows = pa.table({"_ordinal": pa.array([0, 2, 5], pa.int64()), "v": ["a", "c", "f"]})
    other = pa.table({"_ordinal": pa.array([1, 3, 4], pa.int64()), "v": ["b", "d", "e"]})
    empty = rows.slice(0, 0)
    for i, t in enumerate((rows, other, empty)):
        write_shard_rows(t, tmp_path / f"{i}.parquet")
    files = [tmp_path / f"{i}.parquet" for i in range(3)]
    out = pa.Table.from_batches(list(assemble(files, REMOVED_SCHEMA.empty_table(), batch_rows=2)))
    assert out.column("v").to_pylist() == ["a", "b", "c", "d", "e", "f"] and out.column_names == ["v"]
