"""Rows of another layout in a `format: auto` file are read in their own layout (per-row
detection, curation.formats.mapped_record), while a single-layout file reads exactly as before;
a declared layout is never second-guessed (a ShareGPT file declared `openai` quarantines every
row), and an empty file reads as no rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curation.formats import mapped_record
from curation.schemas import DOMAIN_SCHEMAS, InvalidRow
from curation.sources import load_source

NAMES = [f.name for f in DOMAIN_SCHEMAS["chat"] if f.name not in ("row_id", "source")]


def _openai(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"Question {i}?"}, {"role": "assistant", "content": f"Answer {i}."}]}


def _sharegpt(i: int) -> dict:
    return {"conversations": [{"from": "human", "value": f"Ask {i}?"}, {"from": "gpt", "value": f"Reply {i}."}]}


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_a_mixed_auto_file_keeps_every_well_formed_row(tmp_path: Path) -> None:
    rows = [_openai(0), _sharegpt(0), _openai(1), _sharegpt(1), _openai(2),
            {"conversations": [{"from": "wizard", "value": "Poof"}]}, {"id": 7}]
    res = load_source(_jsonl(tmp_path / "mixed.jsonl", rows), "auto", "chat", "mixed")
    assert res.format == "openai" and res.layouts == {"openai": 3, "sharegpt": 2}
    assert res.table.column("prompt").to_pylist() == ["Question 0?", "Ask 0?", "Question 1?", "Ask 1?", "Question 2?"]
    # a broken ShareGPT row is judged as ShareGPT; a row naming no layout as the file's layout
    assert res.dropped == {"bad_role:wizard": 1, "missing_field:messages": 1}
    assert res.quarantine.column("line").to_pylist() == [6, 7]


def test_the_same_rows_declared_in_one_layout_are_not_second_guessed(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "mixed.jsonl", [_openai(0), _sharegpt(0), _openai(1)])
    res = load_source(path, "openai", "chat", "mixed")
    assert res.table.num_rows == 2 and res.dropped == {"missing_field:messages": 1} and res.layouts == {"openai": 2}


def test_a_sharegpt_file_declared_openai_quarantines_every_row(tmp_path: Path) -> None:
    res = load_source(_jsonl(tmp_path / "sg.jsonl", [_sharegpt(i) for i in range(4)]), "openai", "chat", "sg")
    assert res.table.num_rows == 0 and res.rows_in == 4 and res.dropped == {"missing_field:messages": 4}


def test_an_empty_file_is_no_rows(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    res = load_source(tmp_path / "empty.jsonl", "auto", "chat", "empty")
    assert (res.rows_in, res.table.num_rows, res.dropped, res.layouts) == (0, 0, {}, {})


def test_a_row_the_file_layout_reads_is_never_switched(tmp_path: Path) -> None:
    """A Nemotron v1 file whose row lacks `reasoning` (its keys alone say `openai`) is still read as
    Nemotron v1: per-row detection only rescues rows the file's layout rejects, so a single-layout
    file's rows and data version are those of before."""
    v1 = [{**_openai(i), "reasoning": "off"} for i in range(3)] + [_openai(3)]
    res = load_source(_jsonl(tmp_path / "v1.jsonl", v1), "auto", "chat", "v1")
    assert res.format == "nemotron_v1" and res.layouts == {"nemotron_v1": 4} and res.dropped == {}
    declared = load_source(tmp_path / "v1.jsonl", "nemotron_v1", "chat", "v1")
    assert res.table.equals(declared.table)


def test_mapped_record_names_the_layout_that_read_the_row() -> None:
    assert mapped_record("openai", _sharegpt(0), NAMES, per_row=True)[1] == "sharegpt"
    assert mapped_record("openai", _openai(0), NAMES, per_row=True)[1] == "openai"
    with pytest.raises(InvalidRow, match="missing_field:messages"):
        mapped_record("openai", _sharegpt(0), NAMES)  # per_row off: a declared layout
    with pytest.raises(InvalidRow, match="missing_field:messages"):
        mapped_record("openai", {"prompt": "no layout keys"}, NAMES, per_row=True)
