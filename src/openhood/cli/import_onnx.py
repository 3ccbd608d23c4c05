"""``openhood import-onnx MODEL.onnx OUT_DIR``: a bare BERT ONNX export → a servable model folder.

Writes ``model.safetensors`` (the ONNX initializers, read without pickle, named the Hugging Face
way: ``formats.onnx_import``), ``config.json``, the sentence-transformers files
(``modules.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json``) and copies the
tokenizer files from ``--tokenizer DIR`` (default: the bundled all-MiniLM-L6-v2, whose uncased
BERT vocabulary the MiniLM family shares). The vocabulary is checked, not assumed: the sizes
must match, and when the tokenizer folder has weights of its own, the word-embedding rows of
both models are compared id by id — models indexing the same vocabulary have clearly aligned
rows (median cosine ≫ that of a shuffled pairing). The trade-off: the ONNX file does not say
its max sequence length, so ``--max-length`` (default: the tokenizer folder's) must be right.
"""

from __future__ import annotations

import argparse
import sys

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import-onnx",
        help="turn a bare BERT-family ONNX file into a model folder (safetensors + config + tokenizer)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("onnx", help="the .onnx file (e.g. paraphrase-MiniLM-L3-v2.onnx)")
    p.add_argument("out", help="output folder (created)")
    p.add_argument(
        "--tokenizer", default=None, help="folder with tokenizer.json & co. (default: the bundled all-MiniLM-L6-v2)"
    )
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="max sequence length (default: the tokenizer folder's sentence-transformers max_seq_length)",
    )
    p.add_argument("--name", default=None, help="model name recorded in the folder (default: the file's stem)")
    p.add_argument(
        "--check-corpus",
        default=None,
        metavar="FILE.jsonl",
        help="after importing, compare our NumPy engine on the folder with ONNX Runtime on the original "
        "file over these texts and print the worst/mean cosine",
    )
    p.add_argument("--check-limit", type=int, default=None, help="only the first N texts of --check-corpus")
    p.set_defaults(func=run_import)


def run_import(args: argparse.Namespace) -> int:
    from openhood.models import ModelNotFoundError

    try:
        return import_onnx(args)
    except (ValueError, FileNotFoundError, ModelNotFoundError) as exc:
        print(f"openhood import-onnx: error: {exc}", file=sys.stderr)
        return 2


def import_onnx(args: argparse.Namespace) -> int:
    import json
    import shutil
    from pathlib import Path

    import numpy as np
    from safetensors.numpy import save_file

    from openhood.formats.onnx_import import bert_from_onnx
    from openhood.models import resolve_model_dir

    src = Path(args.onnx)
    if not src.is_file():
        raise FileNotFoundError(f"no ONNX file at {src}")
    tok_dir = resolve_model_dir(args.tokenizer)
    out = Path(args.out)
    if out.resolve() == tok_dir.resolve():
        raise ValueError("OUT_DIR must differ from the tokenizer folder")
    imported = bert_from_onnx(src)
    vocab = _tokenizer_vocab_size(tok_dir)
    if vocab != imported.config["vocab_size"]:
        raise ValueError(
            f"the tokenizer in {tok_dir} has {vocab} ids but the model's embedding table has "
            f"{imported.config['vocab_size']} rows: not the model's vocabulary"
        )
    alignment = _row_alignment(tok_dir, imported.tensors["embeddings.word_embeddings.weight"])
    st = _read_json(tok_dir / "sentence_bert_config.json") or {}
    max_length = args.max_length or int(st.get("max_seq_length", imported.config["max_position_embeddings"]))
    if not 2 <= max_length <= imported.config["max_position_embeddings"]:
        raise ValueError(f"--max-length must be in [2, {imported.config['max_position_embeddings']}], got {max_length}")

    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in imported.tensors.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt", "source": src.name},
    )
    (out / "config.json").write_text(json.dumps(imported.config, indent=2) + "\n")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if imported.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": imported.config["hidden_size"],
                "pooling_mode_mean_tokens": True,
                "pooling_mode_cls_token": False,
                "pooling_mode_max_tokens": False,
            },
            indent=2,
        )
        + "\n"
    )
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_length, "do_lower_case": bool(st.get("do_lower_case", False))}, indent=2)
        + "\n"
    )
    copied = [n for n in TOKENIZER_FILES if (tok_dir / n).is_file()]
    for name in copied:
        shutil.copy2(tok_dir / name, out / name)
    info = {
        "source_onnx": str(src.resolve()),
        "name": args.name or src.stem,
        "tokenizer_from": str(tok_dir),
        "onnx_outputs": imported.outputs,
        "normalize": imported.normalize,
        "max_length": max_length,
        "vocab_row_alignment": alignment,
    }
    (out / "import_info.json").write_text(json.dumps(info, indent=2) + "\n")
    cfg = imported.config
    print(
        f"imported {src.name}: BERT {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']} heads, vocab {cfg['vocab_size']}, mean pooling, "
        f"{'L2-normalized' if imported.normalize else 'not normalized'}, max length {max_length}"
    )
    if alignment:
        print(
            f"vocabulary check vs {tok_dir.name}: word-embedding rows aligned id by id, median cosine "
            f"{alignment['aligned_median_cosine']:.3f} (shuffled pairing {alignment['shuffled_median_cosine']:.3f})"
        )
    print(f"tokenizer files copied from {tok_dir}: {', '.join(copied)}; wrote {out}")
    if args.check_corpus:
        from openhood.corpus import read_texts

        texts = read_texts(args.check_corpus, limit=args.check_limit)
        output = imported.outputs["sentence_embedding"]
        r = check_parity(out, src, output, texts)
        print(
            f"parity on {r['texts']} texts ({r['tokens']} tokens): NumPy engine on {out.name} vs ONNX Runtime on "
            f"{src.name} (output {output!r}): worst cosine {r['worst_cosine']:.7f}, mean {r['mean_cosine']:.7f}, "
            f"max |diff| {r['max_abs_diff']:.2e} ({r['seconds']:.0f} s)"
        )
    return 0


def check_parity(folder, onnx_path, output: str, texts: list[str], batch_size: int = 32) -> dict:
    """Our served model on ``folder`` (tokenizer → NumPy engine → pooling) vs ONNX Runtime running
    the original file on the same padded batches: per-text cosine of the pooled vectors."""
    import time

    import numpy as np

    from openhood.backends.onnxruntime_backend import OnnxRuntimeBackend
    from openhood.models import EngineOptions, ModelSpec, ServedModel, load_model
    from openhood.models.text import TextPreprocessor

    t0 = time.perf_counter()
    model = load_model(ModelSpec(path=str(folder)), EngineOptions(backend="numpy"))
    if not isinstance(model, ServedModel) or not isinstance(model.preprocessor, TextPreprocessor):
        raise ValueError(f"{folder} is not a text model")
    reference = OnnxRuntimeBackend.from_file(onnx_path)
    rb = model.preprocessor.encode(texts)
    order = np.argsort(rb.lengths, kind="stable")  # length-sorted batches: little padding
    cos, diff = np.empty(len(texts)), 0.0
    try:
        for s in range(0, len(texts), batch_size):
            idx = order[s : s + batch_size]
            pb = rb.take(idx).pad()
            feeds = {"input_ids": pb.input_ids, "attention_mask": pb.attention_mask}
            ours = model.run_feeds(0, feeds).astype(np.float64)  # (B, C)
            ref = reference.run(feeds)[output].astype(np.float64)  # (B, C)
            cos[idx] = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
            diff = max(diff, float(np.abs(ours - ref).max()))
    finally:
        model.close()
        reference.close()
    return {
        "texts": len(texts),
        "tokens": int(rb.lengths.sum()),
        "worst_cosine": float(cos.min()),
        "mean_cosine": float(cos.mean()),
        "max_abs_diff": diff,
        "seconds": time.perf_counter() - t0,
    }


def _read_json(path):
    import json

    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _tokenizer_vocab_size(folder) -> int:
    spec = _read_json(folder / "tokenizer.json")
    if spec is None:
        raise FileNotFoundError(f"{folder} has no tokenizer.json")
    ids = list(spec["model"]["vocab"].values()) + [t["id"] for t in spec.get("added_tokens", [])]
    return max(ids) + 1


def _row_alignment(folder, word) -> dict | None:
    """Median cosine of word-embedding rows with equal ids in both models, and of a shuffled
    pairing; None when the tokenizer folder has no comparable table."""
    import numpy as np

    from openhood.formats.errors import ModelFileError
    from openhood.formats.weights import read_tensors

    try:
        other = read_tensors(folder, strip_prefix="bert.").get("embeddings.word_embeddings.weight")
    except ModelFileError:  # no weights (or unusable ones): nothing to compare with
        return None
    if other is None or other.shape != word.shape:
        return None

    def median_cos(a, b):
        return float(np.median((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)))

    shuffled = other[np.random.default_rng(0).permutation(len(other))]
    return {
        "aligned_median_cosine": round(median_cos(word, other), 4),
        "shuffled_median_cosine": round(median_cos(word, shuffled), 4),
    }
