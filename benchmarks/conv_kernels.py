"""The SIMD conv kernels against the paths they replaced, one thread, on EfficientNet-Lite0's shapes.

docs/vision.md quotes these: the depthwise conv through ``engine.kernels.depthwise_simd`` (interior
pixels) vs the numba kernel alone (``conv.SIMD_DEPTHWISE = False``), in GMAC/s; the 3×3/2 stem
through the SIMD dense kernel vs im2col + sgemm (``conv.SIMD_DENSE = False``), in ms. Bias and
ReLU6 fused in both. The 1×1 convs (batch 1's MBConv expand/project and head shapes) through
``engine.kernels.pointwise_simd`` (bias + residual + clip in the store) vs sgemm + the separate
epilogue pass (``conv.SIMD_POINTWISE = False``), in GFLOP/s. Best of ``--repeats`` after one
warm-up call, interleaved.

    PYTHONPATH=$PWD/src OPENBLAS_NUM_THREADS=1 .venv/bin/python -u benchmarks/conv_kernels.py
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

# (batch, H, W, C, k, stride) of Lite0 depthwise layers, from 112² down to 7²
DEPTHWISE = [(8, 56, 56, 144, 3, 1), (8, 28, 28, 240, 5, 1), (8, 14, 14, 672, 5, 1), (8, 7, 7, 1152, 5, 1)]
STEM = (32, 224, 224, 3, 32, 3, 2)  # batch, H, W, Cin, Cout, k, stride
# (H, W, Cin, Cout, activation, residual) of batch 1's 1×1 convs: expand (ReLU6), project (+ skip), head
POINTWISE = [
    (112, 112, 16, 96, "relu6", False),
    (28, 28, 40, 240, "relu6", False),
    (14, 14, 480, 80, None, True),
    (14, 14, 112, 672, "relu6", False),
    (14, 14, 672, 112, None, True),
    (7, 7, 192, 1152, "relu6", False),
    (7, 7, 1152, 192, None, True),
    (7, 7, 320, 1280, "relu6", False),
]


def best(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    from openhood.engine.graph import conv
    from openhood.engine.kernels.linear import Linear
    from openhood.engine.kernels.parallel import RowSplitter

    rng = np.random.default_rng(0)
    sp = RowSplitter(1)

    def timed(flag: str, fn) -> tuple[float, float]:
        """(seconds with the SIMD path, seconds without), alternating."""
        on = off = float("inf")
        for _ in range(args.repeats):
            setattr(conv, flag, True)
            on = min(on, best(fn, 1))
            setattr(conv, flag, False)
            off = min(off, best(fn, 1))
        setattr(conv, flag, True)
        return on, off

    try:
        print("| depthwise layer (batch, H, W, C, k, stride) | numba GMAC/s | SIMD GMAC/s | speed-up |")
        print("|---|---:|---:|---:|")
        for n, h, w, c, k, s in DEPTHWISE:
            x = rng.standard_normal((n, h, w, c), dtype=np.float32)
            wt = rng.standard_normal((k, k, c), dtype=np.float32)
            b = rng.standard_normal(c, dtype=np.float32)
            oh, ow = -(-h // s), -(-w // s)
            macs = n * oh * ow * c * k * k
            on, off = timed(
                "SIMD_DEPTHWISE", lambda x=x, wt=wt, b=b, s=s: conv.depthwise_conv(x, wt, b, s, sp, "relu6")
            )
            print(
                f"| {n}×{h}×{w}×{c}, {k}×{k}/{s} | {macs / off / 1e9:.1f} | {macs / on / 1e9:.1f} | {off / on:.2f}× |"
            )
        n, h, w, cin, cout, k, s = STEM
        x = rng.standard_normal((n, h, w, cin), dtype=np.float32)
        lin = Linear(
            rng.standard_normal((k * k * cin, cout), dtype=np.float32), rng.standard_normal(cout, dtype=np.float32)
        )
        on, off = timed("SIMD_DENSE", lambda: conv.conv2d(x, lin, k, s, sp, "relu6"))
        print(
            f"\nstem {k}×{k}/{s}, {cin} → {cout}, batch {n}: im2col + sgemm {off * 1e3:.1f} ms, SIMD dense {on * 1e3:.1f} ms ({off / on:.2f}×)"
        )
        print(
            "\n| 1×1 conv, batch 1 (H×W, Cin → Cout, epilogue) | sgemm + epilogue GFLOP/s | pointwise_simd GFLOP/s | speed-up |"
        )
        print("|---|---:|---:|---:|")
        for h, w, cin, cout, act, skip in POINTWISE:
            x = rng.standard_normal((1, h, w, cin), dtype=np.float32)
            lin = Linear(
                rng.standard_normal((cin, cout), dtype=np.float32), rng.standard_normal(cout, dtype=np.float32)
            )
            res = rng.standard_normal((1, h, w, cout), dtype=np.float32) if skip else None
            out = np.empty((1, h, w, cout), np.float32)
            on, off = timed(
                "SIMD_POINTWISE",
                lambda x=x, lin=lin, act=act, res=res, out=out: [
                    conv.conv2d(x, lin, 1, 1, sp, act, res, out) for _ in range(20)
                ],
            )
            flops = 20 * 2 * h * w * cin * cout
            epi = "bias + ReLU6" if act else "bias + skip"
            print(
                f"| {h}×{w}, {cin} → {cout}, {epi} | {flops / off / 1e9:.1f} | {flops / on / 1e9:.1f} | {off / on:.2f}× |"
            )
    finally:
        sp.close()


if __name__ == "__main__":
    main()
