"""What the Dagster UI shows on an asset's page: a dataset's accounting table with the numbers the
terminal prints (assets.common.accounting_markdown, dagster_project.accounting), and a
checkpoint's lineage as a table of its inputs with roles, versions and links to their assets
(assets.checkpoints.lineage_markdown), every path in the metadata relative to the home."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from assets.common import ACCOUNTING_COLUMNS, CHECKPOINTS, CORPORA, dataset_metadata, key
from curation.versioning import write_versioned
from spec.lineage import make_record, write_record
from spec.paths import HOME_TOKEN

TABLE = pa.table({"prompt": ["a", "b", "c", "d"]})


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _record(home: Path, asset: str, rows_out: int, dropped: dict[str, int], inputs: list, **details) -> dict:
    out = write_versioned(TABLE.slice(0, rows_out), home / "data", asset, rows_in=rows_out + sum(dropped.values()),
                          dropped=dropped, inputs=inputs, code_version="c", config={}, details=details or None)
    return out.record


def _numbers(markdown: str) -> dict[str, int]:
    """The accounting table's numbers (its first table: label, count), by label."""
    first = markdown.split("\n\n")[0].splitlines()[2:]
    return {label: int(count) for label, count in (line.strip("| ").split(" | ") for line in first)}


def _values(meta: dict) -> list[str]:
    """Every metadata value as text, nested JSON included."""
    return [str(getattr(v, "value", v)) for v in meta.values()]


def test_a_dataset_page_shows_the_terminal_rows_numbers(home: Path) -> None:
    from dagster_project.accounting import source_row

    raw_file = {"asset": "file_s", "data_version": "f", "path": str(home / "samples" / "s.jsonl")}
    raw = _record(home, "raw_s", 3, {"missing_field:messages": 4, "invalid_json": 1}, [raw_file],
                  format="openai", reader="jsonl", layouts={"openai": 2, "sharegpt": 1})
    ref = {"asset": "raw_s", "data_version": raw["data_version"], "path": raw["path"]}
    clean = _record(home, "clean_s", 1, {"contaminated:gsm8k": 1, "exact_duplicate": 1}, [ref])
    row = source_row("s", raw, clean)  # what `cascade run` prints for the source

    raw_meta = dataset_metadata(raw)
    table = raw_meta["accounting"].value
    labels = dict(ACCOUNTING_COLUMNS)
    numbers = _numbers(table)
    assert list(numbers) == list(labels.values())
    assert numbers[labels["rows_in"]] == row["rows_in"] == 8 and numbers[labels["quarantined"]] == row["quarantined"] == 5
    assert numbers[labels["kept"]] == raw_meta["rows_out"] == 3
    assert "layout `openai`" in table and "reader `jsonl`" in table and "`sharegpt` 1" in table
    # every reason with its count, most first
    assert re.findall(r"\| `([^`]+)` \| (\d+) \|", table) == [("missing_field:messages", "4"), ("invalid_json", "1")]

    clean_numbers = _numbers(dataset_metadata(clean)["accounting"].value)
    for column in ("kept", "decontaminated", "deduplicated", "filtered"):
        assert clean_numbers[labels[column]] == row[column], column
    # nested paths (the raw file's, the inputs') are home-relative
    assert not [v for v in _values(raw_meta) + _values(dataset_metadata(clean)) if str(home) in v]
    assert f"{HOME_TOKEN}/samples/s.jsonl" in str(raw_meta["inputs"].value)


def test_a_checkpoint_page_shows_its_lineage_as_a_linked_table(home: Path) -> None:
    from assets.checkpoints import _finish, _roles

    parent = home / "checkpoints" / "sft" / "p1"
    prompts = _record(home, "math_rl_prompts", 4, {}, [])
    inputs = [{"asset": "sft", "data_version": "p1", "path": str(parent)},  # as the store hands them: absolute
              {"asset": "math_rl_prompts", "data_version": prompts["data_version"], "path": str(home / "data" / "math_rl_prompts" / prompts["data_version"])},
              {"asset": "reward/math", "data_version": "r7", "path": None}]
    out = home / "checkpoints" / "math_rl" / "v9"
    out.mkdir(parents=True)
    write_record(out, make_record("math_rl", "v9", out, "code1", inputs))
    roles = _roles(("parent", key(CHECKPOINTS, "sft")), ("prompt set", key(CORPORA, "math_rl_prompts")),
                   ("reward model", None), ("checkpoint for math", key(CHECKPOINTS, "sft")))
    result = _finish(home / "checkpoints", out, "v9", "code1", inputs, "math",
                     {"note": str(parent), "curve": dg.MetadataValue.md("a curve")}, {"train": {"policy": str(parent)}}, roles)

    table = result.metadata["lineage"].value
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == [
        "| parent, checkpoint for math: [sft](/assets/checkpoints/sft) | `p1` |",
        f"| prompt set: [math_rl_prompts](/assets/corpora/math_rl_prompts) | `{prompts['data_version']}` |",
        "| reward code: `reward/math` | `r7` |"]
    assert "`code1`" in table
    assert isinstance(result.metadata["lineage"], dg.MarkdownMetadataValue)
    assert result.metadata["inputs"].value[0]["path"] == f"{HOME_TOKEN}/checkpoints/sft/p1"  # still there, portable
    assert not [v for v in _values(result.metadata) if str(home) in v]


def test_a_checkpoint_without_inputs_says_where_the_cascade_starts(home: Path) -> None:
    from assets.checkpoints import lineage_markdown

    assert "the cascade starts here" in lineage_markdown([], {}, "c")
