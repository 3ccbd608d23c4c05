"""``openhood batch`` end to end with the real model: output, ids, errors, resume after SIGKILL, usage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from openhood.cli import main

ARGS = ["--shard-rows", "16", "--batch-size", "4", "--threads", "1"]


def embeddings(path):
    table = pq.read_table(path)
    return table.column("id").to_pylist(), np.array(table.column("embedding").to_pylist(), dtype=np.float32)


def test_output_matches_the_embedder_shard_by_shard(jsonl, tmp_path, texts, embedder, capsys):
    out = tmp_path / "out.parquet"
    assert main(["batch", "--input", str(jsonl), "--output", str(out), *ARGS]) == 0
    ids, emb = embeddings(out)
    assert ids == [str(i) for i in range(len(texts))]
    # The same shards through the public Embedder give the same bits (sorted + padded per batch)...
    want = np.concatenate([embedder.embed(texts[i : i + 16], batch_size=4) for i in range(0, len(texts), 16)])
    assert emb.tobytes() == want.tobytes()
    # ...and, padding or not, each row is the text's own embedding.
    np.testing.assert_allclose(emb[:5], embedder.embed(texts[:5], batch_size=1), atol=2e-6)
    assert pq.read_metadata(out).num_row_groups == 3  # one per shard, streamed
    assert not (tmp_path / "out.parquet.shards").exists()
    assert (tmp_path / "out.errors.jsonl").read_text() == ""
    captured = capsys.readouterr()
    assert "40 rows embedded, 0 rejected" in captured.out
    assert "100.0% 40/40 rows" in captured.err and "rows/s ETA" in captured.err


def test_workers_side_by_side_write_the_same_bytes(jsonl, tmp_path):
    one, three = tmp_path / "one.parquet", tmp_path / "three.parquet"
    assert main(["batch", "--input", str(jsonl), "--output", str(one), *ARGS, "--workers", "1"]) == 0
    assert main(["batch", "--input", str(jsonl), "--output", str(three), *ARGS, "--workers", "3"]) == 0
    assert one.read_bytes() == three.read_bytes()


def test_bad_rows_go_to_the_errors_file_and_the_job_goes_on(tmp_path, embedder):
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"id": "a", "text": "fine"}\n{"id": "b", "txt": "secret"}\nsecret not json\n'
        '{"id": "c", "text": "also fine"}\n{"id": 9, "text": 12}\n'
    )
    out, errs = tmp_path / "o.parquet", tmp_path / "bad.jsonl"
    assert main(["batch", "--input", str(src), "--output", str(out), "--errors", str(errs), *ARGS]) == 0
    ids, emb = embeddings(out)
    assert ids == ["a", "c"]
    np.testing.assert_allclose(emb, embedder.embed(["fine", "also fine"]), atol=2e-6)
    rows = [json.loads(line) for line in errs.read_text().splitlines()]
    assert [(r["row"], r["id"]) for r in rows] == [(1, "b"), (2, None), (4, "9")]
    assert "secret" not in errs.read_text()


def test_csv_and_parquet_inputs_give_the_jsonl_result(jsonl, tmp_path, texts):
    import csv

    import pyarrow as pa

    with open(tmp_path / "in.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["body"])
        w.writerows([t] for t in texts)
    pq.write_table(pa.table({"text": texts}), tmp_path / "in.parquet", row_group_size=7)
    results = []
    for src, extra in ((jsonl, []), (tmp_path / "in.csv", ["--column", "body"]), (tmp_path / "in.parquet", [])):
        out = tmp_path / f"{src.suffix[1:]}.parquet"
        assert main(["batch", "--input", str(src), "--output", str(out), *ARGS, *extra]) == 0
        results.append(embeddings(out))
    for ids, emb in results[1:]:
        assert ids == results[0][0] and emb.tobytes() == results[0][1].tobytes()


def _run(args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "openhood.cli", "batch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_resume_after_sigkill_gives_identical_output(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"row {i} " + "x " * (i % 13)}) + "\n" for i in range(300)))
    src.write_text(src.read_text() + "bad row\n")
    args = ["--input", str(src), "--shard-rows", "6", "--batch-size", "4", "--threads", "1"]
    full = tmp_path / "full.parquet"
    assert _run([*args, "--output", str(full)]).wait(timeout=240) == 0

    cut = tmp_path / "cut.parquet"
    shards = tmp_path / "cut.parquet.shards"
    proc = _run([*args, "--output", str(cut)])
    deadline = time.monotonic() + 120
    while len(list(shards.glob("part-*.parquet"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    finished = len(list(shards.glob("part-*.parquet")))
    assert 3 <= finished < 51 and not cut.exists()

    resumed = _run([*args, "--output", str(cut)])
    out, _ = resumed.communicate(timeout=240)
    assert resumed.returncode == 0
    assert f"({finished} from an earlier run)" in out or f"({finished + 1} from an earlier run)" in out
    assert cut.read_bytes() == full.read_bytes()
    assert (tmp_path / "cut.errors.jsonl").read_bytes() == (tmp_path / "full.errors.jsonl").read_bytes()
    assert json.loads((tmp_path / "cut.errors.jsonl").read_text()) == {
        "row": 300,
        "id": None,
        "reason": "not JSON (Expecting value)",
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--input", "{d}/missing.jsonl", "--output", "{d}/o.parquet"], "does not exist"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/o.csv"], "must be a .parquet file"),
        (["--input", "{d}/in.txt", "--output", "{d}/o.parquet"], "--format"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/o.parquet", "--shard-rows", "0"], ">= 1"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/o.parquet", "--engine", "ray", "--concurrency", "0"], ">= 1"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/o.parquet", "--workers", "0"], "--workers must be >= 1"),
        (
            ["--input", "{d}/in.jsonl", "--output", "{d}/o.parquet", "--engine", "ray", "--workers", "2"],
            "--concurrency",
        ),
        (["--input", "{d}/empty.jsonl", "--output", "{d}/o.parquet"], "has no rows"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/exists.parquet"], "--overwrite"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/other.parquet"], "different job (shard_rows changed)"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/o.parquet", "--column", "nope"], "no field 'nope'"),
        (["--input", "{d}/in.jsonl", "--output", "/proc/self/x.parquet"], "cannot write beside --output"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/no/such/o.parquet"], "the folder {d}/no/such does not exist"),
        (["--input", "{d}/in.jsonl", "--output", "{d}/o.parquet", "--errors", "{d}/nope/e.jsonl"], "does not exist"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "in.txt").write_text("a\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "exists.parquet").write_text("")
    (tmp_path / "other.parquet.shards").mkdir()
    (tmp_path / "other.parquet.shards" / "job.json").write_text("{}")
    store_job = None
    if "other" in argv[3]:
        from openhood.batch import BatchJob

        job = BatchJob(str(tmp_path / "in.jsonl"), str(tmp_path / "other.parquet"), shard_rows=99)
        store_job = job.identity(job.source())
        (tmp_path / "other.parquet.shards" / "job.json").write_text(json.dumps(store_job))
    assert main(["batch", *[a.format(d=tmp_path) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("openhood batch: ") and message.format(d=tmp_path) in err
    assert not (tmp_path / "no").exists() and not (tmp_path / "nope").exists()  # a job never creates folders


def test_blank_texts_are_rejected_rows_like_the_server_400(tmp_path, embedder):
    """Issue 31 item 5: "" and whitespace-only texts are what the server answers with 400
    empty_string; here they are rejected rows with the same code, and the job goes on."""
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(["a", "", "   ", "\n\t", "b"]))
    )
    out = tmp_path / "o.parquet"
    assert main(["batch", "--input", str(src), "--output", str(out), *ARGS]) == 0
    ids, emb = embeddings(out)
    assert ids == ["0", "4"]
    np.testing.assert_allclose(emb, embedder.embed(["a", "b"]), atol=2e-6)
    rows = [json.loads(line) for line in (tmp_path / "o.errors.jsonl").read_text().splitlines()]
    assert [(r["row"], r["code"]) for r in rows] == [(1, "empty_string"), (2, "empty_string"), (3, "empty_string")]
    assert [r["reason"].split(";")[0] for r in rows] == [
        "field 'text' is an empty string",
        "field 'text' is whitespace only",
        "field 'text' is whitespace only",
    ]
