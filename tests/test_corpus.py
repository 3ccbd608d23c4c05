from pathlib import Path

import pytest

from openhood import corpus


def test_limit_and_blank_lines(tmp_path: Path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"text": "x"}\n   \n{"text": "y"}\n{"text": "z"}\n', encoding="utf-8")
    assert corpus.read_texts(p, limit=2) == ["x", "y"]


@pytest.mark.parametrize(
    "line, why",
    [("not json", "not JSON"), ('{"text": 3}', "no string field 'text'"), ("[1, 2]", "no string field 'text'")],
)
def test_bad_lines_name_the_line(tmp_path: Path, line: str, why: str):
    p = tmp_path / "c.jsonl"
    p.write_text('{"text": "ok"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(corpus.CorpusError, match=rf"c\.jsonl:2: .*{why}"):
        corpus.read_texts(p)


def test_missing_file(tmp_path: Path):
    with pytest.raises(corpus.CorpusError, match="does not exist"):
        corpus.read_texts(tmp_path / "nope.jsonl")
