"""Sources map onto canonical schemas; every invalid row is quarantined with its reason."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curation.schemas import DOMAIN_SCHEMAS
from curation.sources import load_benchmark, load_source

_LINES = [
    b'{"question": "What is 2+2?", "final": 4}',
    b"",  # blank: not a row
    b"{not json",
    b'\xff\xfe{"question": "x", "final": "1"}',
    b'{"question": "  ", "final": "1"}',
    b'{"question": "Hi", "final": ["x"]}',
    b"[1, 2]",
    b'{"final": "3"}',
    b'{"question": "\\ud800", "final": "1"}',
    b'{"question": "Fine", "final": "7", "think_response": "<think>t</think>7"}',
]


def test_jsonl_quarantines_each_bad_line_with_a_reason(tmp_path):
    path = tmp_path / "math.jsonl"
    path.write_bytes(b"\n".join(_LINES) + b"\n")
    res = load_source(path, "jsonl", "math", "m", columns={"prompt": "question", "answer": "final"})
    assert res.table.schema == DOMAIN_SCHEMAS["math"]
    assert res.table.column("prompt").to_pylist() == ["What is 2+2?", "Fine"]
    assert res.table.column("answer").to_pylist() == ["4", "7"]  # a number is taken as its text
    assert res.dropped == {
        "invalid_json": 1, "undecodable_text": 2, "empty_field:prompt": 1,
        "wrong_type:answer": 1, "not_an_object": 1, "missing_field:prompt": 1,
    }
    assert res.rows_in == res.table.num_rows + sum(res.dropped.values()) == 9
    q = res.quarantine.to_pylist()
    assert [r["line"] for r in q] == [3, 4, 5, 6, 7, 8, 9]  # the file's own 1-based line numbers
    assert q[0] == {"source": "m", "line": 3, "reason": "invalid_json", "raw": "{not json"}
    with_blanks = tmp_path / "blanks.jsonl"  # blank lines are not rows, but they are lines of the file
    with_blanks.write_bytes(b"\n".join([_LINES[0], b"", b"  ", _LINES[2], b"", _LINES[3]]) + b"\n")
    lines = load_source(with_blanks, "jsonl", "math", "m", columns={"prompt": "question", "answer": "final"})
    assert lines.quarantine.column("line").to_pylist() == [4, 6]
    for shard in range(2):  # a shard reports the same lines
        part = load_source(with_blanks, "jsonl", "math", "m", columns={"prompt": "question", "answer": "final"},
                           shard=shard, shards=2, ordinal_column="_ordinal")
        assert set(part.quarantine.column("line").to_pylist()) <= {4, 6}


def test_row_ids_are_stable_and_content_derived(tmp_path):
    rows = [{"prompt": "p1", "tests": [{"kind": "assert"}]}, {"prompt": "p2", "tests": "[]"}]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    pq.write_table(pa.table({"prompt": ["p2", "p1"], "tests": ["[]", '[{"kind": "assert"}]']}), tmp_path / "c.parquet")
    a = load_source(jsonl, "jsonl", "code", "code_src")
    b = load_source(tmp_path / "c.parquet", "parquet", "code", "code_src")
    assert a.table.column("tests").to_pylist()[0] == '[{"kind": "assert"}]'  # JSON fields serialised
    assert sorted(a.table.column("row_id").to_pylist()) == sorted(b.table.column("row_id").to_pylist())
    other = load_source(jsonl, "jsonl", "code", "other_src")
    assert set(other.table.column("row_id").to_pylist()).isdisjoint(a.table.column("row_id").to_pylist())
    assert load_source(jsonl, "jsonl", "code", "code_src", limit=1).rows_in == 1


def test_parquet_and_hf_rows_use_the_same_validator(tmp_path):
    import datasets

    data = {"prompt": ["ok", ""], "instruction_id_list": [["punctuation:no_comma"], ["x"]], "kwargs": ["[{}]", "[{}]"]}
    pq.write_table(pa.table(data), tmp_path / "if.parquet")
    datasets.Dataset.from_dict(data).save_to_disk(str(tmp_path / "hf"))
    for fmt, path in (("parquet", tmp_path / "if.parquet"), ("hf", tmp_path / "hf")):
        res = load_source(path, fmt, "instruction", "ifs")
        assert res.table.column("instruction_id_list").to_pylist() == [["punctuation:no_comma"]]
        assert res.dropped == {"empty_field:prompt": 1}
        assert json.loads(res.quarantine.column("raw")[0].as_py())["prompt"] == ""


def test_auto_reader_and_layout_read_canonical_files_as_before(tmp_path):
    rows = [{"prompt": "p1", "tests": "[]"}, {"prompt": "p2", "tests": "[]"}]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    for name, reader in (("c.jsonl", "jsonl"), ("c.parquet", "parquet")):
        auto = load_source(tmp_path / name, "auto", "code", "c")
        assert (auto.format, auto.reader) == ("canonical", reader)
        assert auto.table.equals(load_source(tmp_path / name, reader, "code", "c").table)


def test_unknown_domain_or_format_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="domain"):
        load_source(tmp_path / "x.jsonl", "jsonl", "poetry", "s")
    with pytest.raises(ValueError, match="format"):
        load_source(tmp_path / "x.jsonl", "csv", "math", "s")


def test_builtin_benchmarks_ship_real_text():
    he = load_benchmark(builtin="humaneval")
    assert he.num_rows == 164 and "def has_close_elements" in he.column("prompt")[0].as_py()
    gsm = load_benchmark(builtin="gsm8k")
    assert gsm.num_rows == 100 and {"question", "answer", "final_answer"} <= set(gsm.column_names)
    assert all(pa.types.is_string(f.type) for f in gsm.schema)


def test_benchmark_file_with_domain_is_canonical(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    assert load_benchmark(path=path).column_names == ["prompt", "answer"]
    assert load_benchmark(path=path, domain="math", name="ev").schema == DOMAIN_SCHEMAS["math"]
    path.write_text(json.dumps({"prompt": "1+1?"}) + "\n")
    with pytest.raises(ValueError, match="missing_field:answer"):
        load_benchmark(path=path, domain="math")


def test_jsonl_lines_keep_skips_undecoded_lines_but_counts_them(tmp_path):
    """`keep` sees each non-blank line without its newline; lines it rejects are never decoded
    (an invalid one raises nothing) yet still take their position and count towards `limit`."""
    from curation.sources import jsonl_lines

    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n\xff not json\r\n{"a": 3}\n{"a": 4}\n')
    seen = []

    def keep(raw: bytes) -> bool:
        seen.append(raw)
        return raw.startswith((b'{"a": 3', b'{"a": 1'))

    assert [(i, obj) for i, (obj, _, _) in jsonl_lines(path, None, keep)] == [(0, {"a": 1}), (2, {"a": 3})]
    assert seen == [b'{"a": 1}', b"\xff not json", b'{"a": 3}', b'{"a": 4}']
    assert [i for i, _ in jsonl_lines(path, 2, keep)] == [0]
    everything = list(jsonl_lines(path, None))
    assert [i for i, _ in everything] == [0, 1, 2, 3] and everything[1][1][1] == "undecodable_text"
