"""Engine sub-commands: ``embed``, ``profile-ops``, ``export``.

- ``openhood embed "text" …`` prints one JSON vector per line; ``--input file.jsonl`` (one
  ``{"text": …}`` per line) writes an (n, dim) float32 ``.npy`` (``--output``) instead.
- ``openhood profile-ops --batch 32 --seq 128`` prints the per-op cost map, fusion on and off
  (``--model DIR`` of a converted CNN adds the unfused vs fused cost of every block).
- ``openhood export --output model.onnx`` writes our graph as ONNX.

Heavy imports happen inside the command functions, so ``openhood --help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys

from openhood.cli import validate as v
from openhood.progress import StatusLine


def register(subparsers) -> None:
    p = subparsers.add_parser("embed", help="embed texts with the NumPy engine (or ONNX Runtime)")
    p.add_argument("texts", nargs="*", help="texts to embed (or use --input)")
    p.add_argument("--input", type=v.existing_file, help='JSONL file with one {"text": ...} per line')
    p.add_argument("--output", help="where to write the .npy for --input (default: <input>.npy)")
    p.add_argument("--model", type=v.model_dir, help="model folder (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--backend", default="numpy", choices=["numpy", "onnxruntime"])
    p.add_argument("--precision", default="fp32")
    p.add_argument("--batch-size", type=v.positive_int, default=32)
    p.set_defaults(func=cmd_embed)

    p = subparsers.add_parser("profile-ops", help="per-op time / FLOPs / %% of GEMM peak of one forward pass")
    p.add_argument("--batch", type=v.positive_int, default=32)
    p.add_argument("--seq", type=v.positive_int, default=128)
    p.add_argument("--runs", type=v.positive_int, default=3, help="profiled forward passes (after one warm-up)")
    p.add_argument(
        "--model",
        type=v.model_dir,
        help="model folder (default: the bundled all-MiniLM-L6-v2); a folder from "
        "'openhood convert' profiles the CNN (--batch images, --seq ignored) with a per-block table",
    )
    p.add_argument("--threads", type=v.positive_int, default=None, help="engine threads (default: available cores)")
    p.add_argument("--fusion", choices=["on", "off", "both"], default="both")
    p.add_argument(
        "--padded-fraction", type=v.unit_interval_or_zero, default=0.0, help="fraction of rows padded to half length"
    )
    p.add_argument("--show-graph", action="store_true", help="also print the node list of each graph")
    p.set_defaults(func=cmd_profile_ops)

    p = subparsers.add_parser("export", help="export the engine's graph to ONNX")
    p.add_argument("--output", required=True, help="path of the .onnx file to write")
    p.add_argument(
        "--model",
        type=v.model_dir,
        help="model folder: the bundled all-MiniLM-L6-v2 (default), a folder from "
        "`openhood convert` or from `openhood train`",
    )
    p.add_argument("--no-fusion", action="store_true", help="export the unfused textbook graph")
    p.add_argument("--precision", default="fp32")
    p.set_defaults(func=cmd_export)


def cmd_embed(args: argparse.Namespace) -> int:
    import time

    import numpy as np

    from openhood.embedder import Embedder

    if bool(args.texts) == bool(args.input):
        raise SystemExit("give texts as arguments or --input FILE.jsonl (not both, not neither)")
    emb = Embedder.from_pretrained(args.model, backend=args.backend, precision=args.precision)
    if args.texts:
        for row in emb.embed(args.texts, batch_size=args.batch_size):
            print(json.dumps([round(float(v), 7) for v in row]))
        return 0
    from openhood.corpus import CorpusError, read_texts

    try:
        texts = read_texts(args.input)
    except CorpusError as exc:
        raise SystemExit(f"openhood embed: {exc}") from None
    output = args.output or (args.input.rsplit(".", 1)[0] + ".npy")
    out = np.empty((len(texts), emb.dim), dtype=np.float32)
    step = max(args.batch_size * 16, 512)  # progress line every chunk; sorting happens per chunk
    t0 = time.perf_counter()
    status = StatusLine()
    for start in range(0, len(texts), step):
        out[start : start + step] = emb.embed(texts[start : start + step], batch_size=args.batch_size)
        done = min(start + step, len(texts))
        rate = done / max(time.perf_counter() - t0, 1e-9)
        status.update(f"embedded {done}/{len(texts)} texts ({rate:.0f}/s)", force=done == len(texts))
    status.close()
    np.save(output, out, allow_pickle=False)
    print(f"wrote {out.shape} float32 to {output}", file=sys.stderr)
    return 0


def cmd_profile_ops(args: argparse.Namespace) -> int:
    from openhood.engine.models.efficientnet import is_efficientnet_folder

    if args.model and is_efficientnet_folder(args.model):
        return _profile_vision(args)
    from openhood.engine.graph.fusion import fuse
    from openhood.engine.graph.profiler import measure_gemm_peak, profile_graph, random_batch
    from openhood.engine.kernels.blas import blas
    from openhood.engine.models.bert import load_bert
    from openhood.models import model_name_for, resolve_model_dir

    model = load_bert(resolve_model_dir(args.model))
    peak = measure_gemm_peak()
    print(f"model {model_name_for(model.folder)}  batch {args.batch}  seq {args.seq}  runs {args.runs}")
    print(f"BLAS {blas().describe()}  measured sgemm peak (1536^3): {peak:.1f} GFLOP/s")
    feeds = random_batch(args.batch, args.seq, padded_fraction=args.padded_fraction)
    variants = {"on": [True], "off": [False], "both": [True, False]}[args.fusion]
    totals = {}
    for fused in variants:
        graph = fuse(model.graph) if fused else model.graph
        if args.show_graph:
            print("\n" + graph.summary())
        prof = profile_graph(graph, feeds, runs=args.runs, threads=args.threads)
        totals[fused] = prof.total_seconds / prof.forwards
        print()
        print(prof.table(peak, f"fusion {'on' if fused else 'off'}: ms per forward pass"))
    if len(totals) == 2:
        print(
            f"\nfusion on / off time: {totals[True] / totals[False]:.3f}  (speed-up {totals[False] / totals[True]:.2f}x)"
        )
    return 0


def _profile_vision(args: argparse.Namespace) -> int:
    """A CNN folder (openhood convert): the op table fused and unfused, then cost per block."""
    import numpy as np

    from openhood.engine.graph.profiler import block_table, measure_gemm_peak, profile_graph
    from openhood.engine.kernels.blas import blas
    from openhood.engine.models.efficientnet import INPUT_NAME, load_efficientnet

    model = load_efficientnet(args.model)
    peak = measure_gemm_peak()
    size = model.image_spec.crop
    print(f"model {model.config['architecture']}  batch {args.batch}  image {size}x{size}  runs {args.runs}")
    print(f"BLAS {blas().describe()}  measured sgemm peak (1536^3): {peak:.1f} GFLOP/s")
    x = np.random.default_rng(0).uniform(-1, 1, (args.batch, size, size, 3)).astype(np.float32)
    variants = {"on": [True], "off": [False], "both": [False, True]}[args.fusion]
    profiles = {}
    for fused in variants:
        graph = model.graph(fused=fused)
        if args.show_graph:
            print("\n" + graph.summary())
        profiles[fused] = profile_graph(graph, {INPUT_NAME: x}, runs=args.runs, threads=args.threads)
        print()
        print(profiles[fused].table(peak, f"fusion {'on' if fused else 'off'}: ms per forward pass"))
    if len(profiles) == 2:
        print("\nper block, ms per forward pass (BatchNorm folded, ReLU6 and residual in the conv epilogue):")
        print(block_table(profiles[False], profiles[True]))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from openhood.backends import prepare_graph
    from openhood.engine.models.bert import load_bert
    from openhood.engine.models.efficientnet import is_efficientnet_folder, load_efficientnet
    from openhood.engine.models.mlp import load_mlp
    from openhood.export.onnx_export import export_onnx
    from openhood.models import resolve_model_dir
    from openhood.train.checkpoint import CheckpointError, is_mlp_folder

    if args.model and is_mlp_folder(args.model):  # a folder from `openhood train`
        try:
            if args.precision != "fp32":
                raise CheckpointError("the MLP exports in fp32 only")
            mlp = load_mlp(args.model)
        except CheckpointError as exc:
            print(f"openhood export: {exc}", file=sys.stderr)
            return 2
        graph = prepare_graph(mlp.graph(), fusion=not args.no_fusion)
        path = export_onnx(graph, args.output)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(graph.nodes)} engine nodes)")
        return 0
    if args.model and is_efficientnet_folder(args.model):
        if args.precision != "fp32":
            raise SystemExit("openhood export: the CNN exports in fp32 only")
        graph = load_efficientnet(args.model).graph(fused=not args.no_fusion)
        path = export_onnx(graph, args.output)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, {len(graph.nodes)} engine nodes)")
        return 0
    model = load_bert(resolve_model_dir(args.model))
    graph = prepare_graph(model.graph, fusion=not args.no_fusion, precision=args.precision, model_dir=model.folder)
    path = export_onnx(graph, args.output)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, {len(graph.nodes)} engine nodes)")
    return 0
