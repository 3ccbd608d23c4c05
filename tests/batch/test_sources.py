"""Shard planning and reading: every row lands in exactly one shard, in order, whatever the format."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from openhood.batch.sources import InputError, Source, plan, read_shard


def all_rows(source, shard_rows):
    specs = list(plan(source, shard_rows))
    assert [s.index for s in specs] == list(range(len(specs)))
    assert all(s.rows == shard_rows for s in specs[:-1]) and 0 < specs[-1].rows <= shard_rows
    ids, values, errors = [], [], []
    for spec in specs:
        shard = read_shard(source, spec)
        ids += shard.ids
        values += shard.values
        errors += shard.errors
    return ids, values, errors


@pytest.mark.parametrize("shard_rows", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("trailing_newline", [True, False])
def test_jsonl_shards_cover_every_line_once(tmp_path, shard_rows, trailing_newline):
    lines = [json.dumps({"text": f"t{i}"}) for i in range(10)]
    lines[4] = ""  # blank: a line (numbering goes on) but not a row
    lines[6] = json.dumps({"id": "doc-6", "text": "six"})
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""))
    ids, values, errors = all_rows(Source.open(path), shard_rows)
    assert ids == ["0", "1", "2", "3", "5", "doc-6", "7", "8", "9"]
    assert values == ["t0", "t1", "t2", "t3", "t5", "six", "t7", "t8", "t9"]
    assert errors == []


def test_jsonl_bad_rows_carry_a_reason_not_the_text(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'{"text": "ok"}\nnot json secret\n{"text": null, "id": 3}\n{"id": [1], "text": "x"}\n'
        b'["secret"]\n{"body": "secret"}\n{"text": "\xff\xfe"}\n'
    )
    _ids, values, errors = all_rows(Source.open(path), 3)
    assert values == ["ok"]
    reasons = {e.row: e.reason for e in errors}
    assert set(reasons) == {1, 2, 3, 4, 5, 6}
    assert reasons[1].startswith("not JSON") and reasons[6] == "not UTF-8"
    assert "null" in reasons[2] and "id is a list" in reasons[3] and "no field 'text'" in reasons[5]
    assert not any("secret" in r for r in reasons.values())


@pytest.mark.parametrize("shard_rows", [1, 2, 5])
def test_csv_records_may_span_lines(tmp_path, shard_rows):
    path = tmp_path / "in.csv"
    path.write_text('id,body\r\na,"first\nline"\r\nb,second\r\nc,"with ""quotes"", commas"\r\nd\r\ne,last', newline="")
    ids, values, errors = all_rows(Source.open(path, column="body"), shard_rows)
    assert ids == ["a", "b", "c", "e"]
    assert values == ["first\nline", "second", 'with "quotes", commas', "last"]
    assert [(e.row, e.reason) for e in errors] == [(3, "1 fields, the header has 2")]


@pytest.mark.parametrize("shard_rows", [1, 3, 4, 10])
def test_parquet_rows_across_row_groups(tmp_path, shard_rows):
    path = tmp_path / "in.parquet"
    table = pa.table({"id": list(range(100, 110)), "text": [f"t{i}" if i != 5 else None for i in range(10)]})
    pq.write_table(table, path, row_group_size=3)
    ids, _values, errors = all_rows(Source.open(path), shard_rows)
    assert ids == [str(100 + i) for i in range(10) if i != 5]
    assert [(e.row, e.id) for e in errors] == [(5, "105")]


def test_whole_input_mistakes_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        Source.open(tmp_path / "missing.jsonl")
    (tmp_path / "x.txt").write_text("a")
    with pytest.raises(InputError, match="--format"):
        Source.open(tmp_path / "x.txt")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="no column 'text'"):
        list(plan(Source.open(tmp_path / "x.csv"), 10))
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "x.parquet")
    with pytest.raises(InputError, match="expected strings"):
        list(plan(Source.open(tmp_path / "x.parquet"), 10))
