"""``openhood tokenize``: text mode and JSONL file mode (run in-process, on generated text)."""

from __future__ import annotations

import json

from openhood.cli import main


def test_text_mode_prints_tokens_and_ids(capsys, model_dir):
    assert main(["tokenize", "--model", str(model_dir), "Hello, world!"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["tokens: [CLS] hello , world ! [SEP]", "ids:    101 7592 1010 2088 999 102"]


def test_file_mode_writes_ids_in_order(tmp_path, capsys, tok):
    texts = [f"line {i} with text ÄÖÜ {'x' * (i % 7)}" for i in range(25)] + ["", "[SEP] inside"]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    assert main(["tokenize", "--input", str(src), "--output", str(dst), "--batch-size", "4", "--max-length", "8"]) == 0
    rows = [json.loads(line)["ids"] for line in dst.read_text(encoding="utf-8").splitlines()]
    assert rows == [tok.encode(t, max_length=8).tolist() for t in texts]
    captured = capsys.readouterr()
    assert "27 texts" in captured.out and "tokens/s" in captured.out
    assert "100.0%" in captured.err  # the progress line reached the end


def test_file_mode_reports_bad_line_without_echoing_it(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "fine"}\n{"txt": "secret words"}\n', encoding="utf-8")
    assert main(["tokenize", "--input", str(src), "--output", str(tmp_path / "o.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "in.jsonl:2" in err and "secret" not in err


def test_usage_errors(capsys):
    assert main(["tokenize"]) == 2
    assert main(["tokenize", "--input", "x.jsonl"]) == 2
