"""``openhood quantize``: post-training int8 quantization of a model folder.

    openhood quantize --model DIR --calibration corpus.jsonl --samples 800 --out OUT \
        [--method minmax|percentile|mse] [--target-cosine 0.9965] [--weight-bits 7|8] [--smooth-alpha 0.5]
        [--limit 20000]

Prints the corpus's token-length distribution next to the calibration set's, a progress line
per phase, the per-layer plan with the reason for each decision, and the held-out quality of
the ONNX Runtime int8 model. ``OUT`` becomes a model folder: the small config / tokenizer files
copied, ``model.safetensors`` linked to the fp32 source (the engine builds its graph from it),
plus ``model.int8.safetensors``, ``model.int8.onnx`` and ``model.fp16.safetensors``. Serve it
with ``openhood serve --model OUT --precision int8``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from openhood.cli import validate as v

SMOOTH_ALPHA = 0.5  # the SmoothQuant paper's default; measured on MiniLM in docs/benchmarks.md
COPIED = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "quantize", help="int8 post-training quantization with calibration and a sensitivity pass"
    )
    p.add_argument("--model", type=v.model_dir, help="model folder (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument(
        "--calibration", required=True, type=v.existing_file, help='JSONL corpus, one {"text": ...} per line'
    )
    p.add_argument(
        "--samples", type=v.positive_int, default=800, help="calibration texts drawn, length-matched (default 800)"
    )
    p.add_argument("--out", required=True, help="output model folder")
    p.add_argument(
        "--method",
        choices=["minmax", "percentile", "mse"],
        default="percentile",
        help="activation range estimator (default percentile 99.99)",
    )
    p.add_argument(
        "--target-cosine",
        type=v.unit_interval,
        default=0.9965,
        help="held-out mean cosine vs fp32 the plan must reach (default 0.9965: on MiniLM about 90%%+ top-10 neighbour agreement, docs/benchmarks.md)",
    )
    p.add_argument(
        "--weight-bits",
        type=int,
        choices=[7, 8],
        default=7,
        help="weight code width: 7 runs ORT's fast u8xs8 kernel without int16 saturation on CPUs "
        "without VNNI; 8 is more accurate, on the exact but slower u8xu8 kernel (default 7)",
    )
    p.add_argument(
        "--smooth-alpha",
        type=v.unit_interval_or_zero,
        default=SMOOTH_ALPHA,
        help="SmoothQuant migration strength in (0, 1]: each layer is also tried with per-channel "
        "factors moving activation outliers into the weights, kept where it measures better; "
        f"0 = off (default {SMOOTH_ALPHA})",
    )
    p.add_argument(
        "--limit", type=v.positive_int, default=20000, help="read at most this many corpus lines (default 20000)"
    )
    p.add_argument(
        "--holdout-fraction",
        type=v.open_fraction,
        default=0.2,
        help="share of the samples kept for the sensitivity pass",
    )
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_quantize)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_quantize(args: argparse.Namespace) -> int:
    import numpy as np

    from openhood.corpus import CorpusError, read_texts
    from openhood.engine.graph.fusion import fuse
    from openhood.engine.models.bert import load_bert
    from openhood.engine.quant.calibration import (
        MIN_CALIBRATION_SAMPLES,
        CalibrationSetError,
        format_length_table,
        length_summary,
        split_calibration,
    )
    from openhood.engine.quant.progress import Progress
    from openhood.engine.quant.quantizer import format_decisions, quantize
    from openhood.models import model_name_for, resolve_model_dir
    from openhood.tokenizer import WordPieceTokenizer

    t0 = time.perf_counter()
    if not 0.0 <= args.smooth_alpha <= 1.0:
        raise SystemExit(f"--smooth-alpha must be in [0, 1] (0 = off), got {args.smooth_alpha}")
    qmax = 2 ** (args.weight_bits - 1) - 1  # 63 or 127
    model = load_bert(resolve_model_dir(args.model))
    graph = fuse(model.graph)
    try:
        texts = read_texts(args.calibration, limit=args.limit)
    except CorpusError as exc:
        raise SystemExit(f"openhood quantize: {exc}") from None
    tok = WordPieceTokenizer.from_pretrained(model.folder)
    rb = tok.encode_batch(texts, max_length=model.config.max_length)
    lengths = np.asarray(rb.lengths)
    drawn = min(args.samples, len(texts))
    try:
        split = split_calibration(lengths, drawn, args.holdout_fraction, MIN_CALIBRATION_SAMPLES, args.seed)
    except CalibrationSetError as exc:
        raise SystemExit(f"openhood quantize: {exc}") from None
    lengths_table = {
        "corpus": length_summary(lengths),
        "calibration": length_summary(lengths[split.calibrate]),
        "held-out": length_summary(lengths[split.holdout]),
    }
    _log(f"token lengths ({len(texts)} corpus texts read, {drawn} drawn stratified on length):")
    _log(format_length_table(lengths_table))

    holdout = [rb[int(i)] for i in split.holdout]
    result = quantize(
        graph,
        [rb[int(i)] for i in split.calibrate],
        holdout,
        method=args.method,
        pad_id=tok.pad_id,
        target_cosine=args.target_cosine,
        min_samples=MIN_CALIBRATION_SAMPLES,
        log=_log,
        weight_qmax=qmax,
        smooth_alpha=args.smooth_alpha,
        progress=lambda label, total: Progress(f"{label:<11}", total, always=True),
    )
    print(format_decisions(result.decisions))
    out = write_folder(
        Path(args.out),
        model,
        graph,
        result,
        {
            "source_model": model_name_for(model.folder),
            "method": args.method,
            "samples": int(drawn),
            "calibration_texts": len(split.calibrate),
            "holdout_texts": len(split.holdout),
            "target_cosine": args.target_cosine,
            "seed": args.seed,
            "token_lengths": lengths_table,
            "weights": f"int8 symmetric per output channel [-{qmax}, {qmax}]",
            "weight_qmax": qmax,
            "activations": "uint8 asymmetric per tensor",
            "smooth_alpha": args.smooth_alpha,
            "smoothed_layers": sorted(result.smooth),
            "onnx_weight_encoding": "s8 (7-bit codes, u8xs8 kernel)"
            if qmax <= 63
            else "u8 + zero point 128 (u8xu8 kernel)",
        },
        holdout,
        tok.pad_id,
    )
    _log(f"wrote {out} in {time.perf_counter() - t0:.0f} s")
    return 0


def write_folder(out: Path, model, graph, result, info: dict, holdout, pad_id: int) -> Path:
    """Write the output model folder and check the ONNX int8 model on the held-out texts."""
    import onnx

    from openhood.backends.ort_session import embed_batches, make_session
    from openhood.engine.quant.evaluate import quality
    from openhood.engine.quant.quantizer import padded_batches
    from openhood.engine.quant.storage import FP16_FILE, INT8_FILE, apply_int8, save_fp16, save_int8
    from openhood.export.onnx_export import graph_to_onnx

    out.mkdir(parents=True, exist_ok=True)
    src = model.folder
    if out.resolve() == src.resolve():
        raise ValueError("--out must differ from the model folder (the fp32 weights stay where they are)")
    for name in COPIED:
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)
    if (src / "1_Pooling").is_dir():
        shutil.copytree(src / "1_Pooling", out / "1_Pooling", dirs_exist_ok=True)
    link = out / "model.safetensors"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to((src / "model.safetensors").resolve())

    int8_path = save_int8(out / INT8_FILE, graph, result, info)
    save_fp16(out / FP16_FILE, graph)
    int8_graph = apply_int8(graph, int8_path)
    onnx_model = graph_to_onnx(int8_graph)  # the graph ONNX Runtime serves: int8 layers and table
    onnx.save(onnx_model, str(out / "model.int8.onnx"))

    batches = padded_batches(sorted(holdout, key=len), pad_id=pad_id)
    ref = embed_batches(make_session(graph_to_onnx(graph)), batches)
    got = embed_batches(make_session(onnx_model), batches)
    q = quality(ref, got)
    _log(
        f"ONNX Runtime int8 vs fp32 on {len(ref)} held-out texts: cos mean {q['cos_mean']:.5f} "
        f"min {q['cos_min']:.5f}, top-10 agreement {q['top10']:.3f}"
    )
    sizes = {
        p.name: p.stat().st_size
        for p in (src / "model.safetensors", int8_path, out / FP16_FILE, out / "model.int8.onnx")
    }
    _log("sizes: " + json.dumps({k: f"{v / 1e6:.1f} MB" for k, v in sizes.items()}))
    return out
