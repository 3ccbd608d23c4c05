"""Precision benchmark: fp32 / fp16 / int8 on both backends, plus ORT's quantize_dynamic.

    openhood quantize --calibration CORPUS --samples 800 --out /tmp/minilm-int8 --target-cosine 0.995
    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/precision.py \
        --corpus /work/shared/data/dev_corpus.jsonl --quantized /tmp/minilm-int8
    # ONNX Runtime variants only (less contention on 2 cores), no calibration experiment:
    ... --backends onnxruntime --skip-calibration-experiment --rounds 3

Evaluation texts are corpus lines ``--offset`` … ``--offset + --limit`` (the quantizer read the
first 20000 lines for calibration, so they are disjoint from its samples). Every variant is
loaded through the real plumbing (``load_model`` with backend and precision, the served path);
the anchors are
``onnxruntime.quantization.quantize_dynamic`` applied to our fp32 ONNX export, with its
defaults (s8 weights per tensor) and with per-channel + reduce_range (7-bit weights, ORT's
advice for CPUs without VNNI).

- size: bytes on disk of each variant's weight file (safetensors for NumPy, .onnx for ORT);
- throughput: texts/s at batch 32 (length-sorted batches, padded to their longest) and batch 1,
  variants interleaved batch by batch, best of ``--rounds`` per batch (shared, noisy machine);
- quality vs the same backend's fp32: mean / min cosine and top-10 nearest-neighbour agreement
  (each of the ``--limit`` texts queries the others);
- calibration experiment: the stored plan (and an all-static plan) with ranges calibrated on
  short texts only vs length-matched texts, evaluated on the longest eval texts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def batches_of(seqs, size, pad_id):
    from openhood.engine.quant.quantizer import padded_batches

    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    return order, padded_batches([seqs[i] for i in order], size, pad_id=pad_id)


def embed_all(backend, seqs, pad_id, size=32):
    order, batches = batches_of(seqs, size, pad_id)
    out = np.empty((len(seqs), backend.dim), dtype=np.float32)
    out[order] = np.concatenate([backend.embed(ids, mask) for ids, mask in batches])
    return out


class Served:
    """A served model (backend + pooling postprocessor) behind ``embed(ids, mask)``."""

    def __init__(self, model):
        self.model = model
        self.dim = model.output.shape[0]

    def embed(self, ids, mask):
        return self.model.run_feeds(0, {"input_ids": ids, "attention_mask": mask})


class OrtFile:
    """A plain ONNX file (pooled output) behind ``embed`` (for the quantize_dynamic anchors)."""

    def __init__(self, model, dim):
        from openhood.backends.ort_session import make_session

        source = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
        self.session = make_session(source)
        self.output = self.session.get_outputs()[0].name
        self.dim = dim

    def embed(self, ids, mask):
        return self.session.run(
            [self.output], {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
        )[0]


def throughput(variants, batch_sets, rounds):
    """name → {label: texts/s}, interleaving variants batch by batch, best of ``rounds``."""
    best = {name: {label: [np.inf] * len(bs) for label, bs in batch_sets.items()} for name in variants}
    names = list(variants)
    # A fresh (seeded) order for every batch: a fixed rotation keeps the same variant right after
    # the same neighbour, and a NumPy call right after an ORT call runs slower (docs/benchmarks.md).
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        for label, bs in batch_sets.items():
            for i, (ids, mask) in enumerate(bs):
                for name in rng.permutation(names):
                    t0 = time.perf_counter()
                    variants[name].embed(ids, mask)
                    best[name][label][i] = min(best[name][label][i], time.perf_counter() - t0)
    n = {label: sum(len(ids) for ids, _ in bs) for label, bs in batch_sets.items()}
    return {name: {label: n[label] / sum(best[name][label]) for label in batch_sets} for name in names}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument(
        "--quantized",
        required=True,
        nargs="+",
        help="output folder(s) of `openhood quantize` (e.g. two --target-cosine values); the first one "
        "also runs the calibration experiment",
    )
    ap.add_argument("--offset", type=int, default=20000)
    ap.add_argument("--limit", type=int, default=2000, help="quality texts (and retrieval pool size)")
    ap.add_argument("--throughput-texts", type=int, default=256, help="texts timed at batch 32")
    ap.add_argument("--single-texts", type=int, default=48, help="texts timed at batch 1")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip-numpy-quality", action="store_true")
    ap.add_argument(
        "--backends",
        nargs="+",
        choices=["numpy", "onnxruntime"],
        default=["numpy", "onnxruntime"],
        help="our backends to run (the quantize_dynamic anchors always run); ORT alone is a less "
        "contended speed comparison on 2 cores",
    )
    ap.add_argument("--skip-calibration-experiment", action="store_true")
    args = ap.parse_args(argv)
    if "onnxruntime" not in args.backends:
        ap.error(
            "--backends must include onnxruntime: the quantize_dynamic anchors are measured against ONNX Runtime fp32"
        )

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from openhood.corpus import read_texts
    from openhood.engine.graph.fusion import fuse
    from openhood.engine.models.bert import load_bert
    from openhood.engine.quant.calibration import stratified_sample
    from openhood.engine.quant.evaluate import quality
    from openhood.engine.quant.ops import quantize_weight
    from openhood.engine.quant.plan import LayerPlan, apply_plan, with_ranges
    from openhood.engine.quant.quantizer import calibrate
    from openhood.engine.quant.storage import FP16_FILE, INT8_FILE, apply_fp16, load_plan, read_int8
    from openhood.export.onnx_export import graph_to_onnx
    from openhood.models import EngineOptions, ModelSpec, load_model
    from openhood.tokenizer import WordPieceTokenizer

    qdirs = [Path(p) for p in args.quantized]
    qdir = qdirs[0]
    t_start = time.perf_counter()
    all_texts = read_texts(args.corpus, limit=args.offset + args.limit)
    texts = all_texts[args.offset :]
    tok = WordPieceTokenizer.from_pretrained(qdir)
    pad_id = int(tok.pad_id)
    rb = tok.encode_batch(texts, max_length=256)
    seqs = [rb[i] for i in range(len(rb))]
    print(
        f"# {len(seqs)} eval texts (corpus lines {args.offset}..{args.offset + len(seqs)}), "
        f"mean {np.mean(rb.lengths):.1f} tokens",
        flush=True,
    )

    tmp = Path(tempfile.mkdtemp(prefix="openhood-precision-"))
    model = load_bert(qdir)
    fp32_onnx = tmp / "model.fp32.onnx"
    onnx.save(graph_to_onnx(fuse(model.graph)), str(fp32_onnx))
    fp16_onnx = tmp / "model.fp16.onnx"
    onnx.save(graph_to_onnx(apply_fp16(fuse(model.graph))), str(fp16_onnx))
    dyn = tmp / "model.qdyn.onnx"
    quantize_dynamic(str(fp32_onnx), str(dyn), weight_type=QuantType.QInt8)
    dyn_pc = tmp / "model.qdyn-pc-rr.onnx"
    quantize_dynamic(str(fp32_onnx), str(dyn_pc), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)

    def plan_label(d: Path) -> str:
        _, plan, info = read_int8(d / INT8_FILE)
        modes = [v["mode"] for v in plan["layers"].values()]
        bits = 7 if int(info.get("weight_qmax", 127)) <= 63 else 8
        return (
            f"target {info.get('target_cosine')}, {bits}-bit w: {modes.count('static')}s/{modes.count('dynamic')}d/"
            f"{modes.count('fp32')}f"
        )

    variants, int8_files = {}, {}
    for backend in args.backends:
        for precision in ("fp32", "fp16"):
            variants[f"{backend} {precision}"] = Served(
                load_model(ModelSpec(path=str(qdir)), EngineOptions(backend=backend, precision=precision))
            )
        for d in qdirs:
            name = f"{backend} int8 ({plan_label(d)})"
            variants[name] = Served(
                load_model(ModelSpec(path=str(d)), EngineOptions(backend=backend, precision="int8"))
            )
            int8_files[name] = d / (INT8_FILE if backend == "numpy" else "model.int8.onnx")
    dim = model.config.hidden
    variants["ORT quantize_dynamic (default)"] = OrtFile(dyn, dim)
    variants["ORT quantize_dynamic (per-channel, reduce_range)"] = OrtFile(dyn_pc, dim)
    sizes = {
        "numpy fp32": (qdir / "model.safetensors").resolve().stat().st_size,
        "numpy fp16": (qdir / FP16_FILE).stat().st_size,
        "onnxruntime fp32": fp32_onnx.stat().st_size,
        "onnxruntime fp16": fp16_onnx.stat().st_size,
        "ORT quantize_dynamic (default)": dyn.stat().st_size,
        "ORT quantize_dynamic (per-channel, reduce_range)": dyn_pc.stat().st_size,
    }
    sizes.update({name: path.stat().st_size for name, path in int8_files.items()})
    fp32_size = {
        "numpy": sizes["numpy fp32"],
        "onnxruntime": sizes["onnxruntime fp32"],
        "ORT": sizes["onnxruntime fp32"],
    }

    # Throughput.
    _, b32 = batches_of(seqs[: args.throughput_texts], 32, pad_id)
    b1 = [(s[None, :], np.ones((1, len(s)), dtype=np.int64)) for s in seqs[: args.single_texts]]
    for v in variants.values():  # warm-up
        v.embed(*b1[0])
        v.embed(*b32[0])
    tput = throughput(variants, {"b32": b32, "b1": b1}, args.rounds)
    print(f"# throughput done ({time.perf_counter() - t_start:.0f} s)", flush=True)

    # Quality, each against its own backend's fp32.
    ref = {
        "numpy": None
        if args.skip_numpy_quality or "numpy" not in args.backends
        else embed_all(variants["numpy fp32"], seqs, pad_id),
        "onnxruntime": embed_all(variants["onnxruntime fp32"], seqs, pad_id),
    }
    qual = {}
    for name, v in variants.items():
        base = name.split()[0] if name.split()[0] in ref else "onnxruntime"
        if ref[base] is None or name.endswith(" fp32"):
            continue
        qual[name] = quality(ref[base], embed_all(v, seqs, pad_id))
    print(f"# quality done ({time.perf_counter() - t_start:.0f} s)", flush=True)

    print(
        "\n| variant | size on disk | size vs fp32 | b32 texts/s | b32 vs fp32 | b1 texts/s | b1 vs fp32 | cos mean | cos min | top-10 agreement |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in variants:
        fam = name.split()[0]
        base = "numpy fp32" if fam == "numpy" else "onnxruntime fp32"
        q = qual.get(name)
        qtxt = (
            f"{q['cos_mean']:.4f} | {q['cos_min']:.4f} | {100 * q['top10']:.1f}%"
            if q
            else ("1 | 1 | 100%" if name.endswith("fp32") else "– | – | –")
        )
        print(
            f"| {name} | {sizes[name] / 1e6:.1f} MB | {sizes[name] / fp32_size[fam]:.0%} | {tput[name]['b32']:.1f} | "
            f"{tput[name]['b32'] / tput[base]['b32']:.2f}x | {tput[name]['b1']:.1f} | {tput[name]['b1'] / tput[base]['b1']:.2f}x | {qtxt} |"
        )

    if args.skip_calibration_experiment:
        return 0
    # Calibration experiment: short-only vs length-matched ranges, evaluated on long texts.
    graph = fuse(model.graph)
    base_plan, codes, smooth, _, info = load_plan(graph, qdir / INT8_FILE)
    pool = all_texts[: args.offset]
    prb = tok.encode_batch(pool, max_length=256)
    plen = np.asarray(prb.lengths)
    n_cal = int(info.get("calibration_texts", 640))
    short_idx = np.flatnonzero(plen <= np.percentile(plen, 25))
    short_idx = np.random.default_rng(0).choice(short_idx, size=min(n_cal, len(short_idx)), replace=False)
    matched_idx = stratified_sample(plen, n_cal, seed=1)
    method = info.get("method", "percentile")
    inv = {n: 1.0 / s for n, s in smooth.items()}  # smoothed layers are calibrated on x / s
    ranges = {
        "short only": calibrate(graph, [prb[int(i)] for i in short_idx], method, inv_smooth=inv),
        "length-matched": calibrate(graph, [prb[int(i)] for i in matched_idx], method, inv_smooth=inv),
    }
    long_ids = [i for i in range(len(seqs)) if len(seqs[i]) >= np.percentile(rb.lengths, 90)]
    long_seqs = [seqs[i] for i in long_ids]
    long_ref = embed_all(variants["onnxruntime fp32"], long_seqs, pad_id)
    qmax = int(info.get("weight_qmax", 127))  # files from before 7-bit weights were 8-bit
    for d in base_plan:  # the all-static variant also needs codes for the plan's float layers
        codes.setdefault(d.layer, quantize_weight(graph.node(d.layer).linear.weight.T, qmax=qmax))
    all_static = [LayerPlan(**{**p.__dict__, "mode": "static"}) for p in base_plan]
    cal_lengths = {
        k: f"median {np.median(plen[idx]):.0f}, p90 {np.percentile(plen[idx], 90):.0f}"
        for k, idx in (("short only", short_idx), ("length-matched", matched_idx))
    }
    print(
        f"\nCalibration experiment: {len(long_seqs)} long eval texts (>= {np.percentile(rb.lengths, 90):.0f} tokens), "
        f"{n_cal} calibration texts each, method {method}, ONNX Runtime int8.\n"
    )
    print("| plan | calibration set (tokens) | cos mean | cos min | top-10 agreement |")
    print("|---|---|---|---|---|")
    for plan_name, decisions in (("stored plan", base_plan), ("all layers static", all_static)):
        for cal_name, rng in ranges.items():
            g = apply_plan(graph, with_ranges(decisions, rng), codes, smooth=smooth)
            q = quality(long_ref, embed_all(OrtFile(graph_to_onnx(g), dim), long_seqs, pad_id))
            print(
                f"| {plan_name} | {cal_name} ({cal_lengths[cal_name]}) | {q['cos_mean']:.4f} | {q['cos_min']:.4f} | {100 * q['top10']:.1f}% |"
            )
    print(
        f"\n# total {time.perf_counter() - t_start:.0f} s; plan modes: "
        + json.dumps({m: sum(d.mode == m for d in base_plan) for m in ("static", "dynamic", "fp32")})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
