"""The SIMD conv kernels against the paths they replaced, one thread, on EfficientNet-Lite0's shapes.

docs/vision.md quotes these: the depthwise conv through ``engine.depthwise_simd`` (interior
pixels) vs the numba kernel alone (``conv.SIMD_DEPTHWISE = False``), in GMAC/s; the 3×3/2 stem
through the SIMD dense kernel vs im2col + sgemm (``conv.SIMD_DENSE = False``), in ms. Bias and
ReLU6 fused in both. Best of ``--repeats`` after one warm-up call, interleaved.

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

    from openhood.engine import conv
    from openhood.engine.linear import Linear
    from openhood.engine.parallel import RowSplitter

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
    finally:
        sp.close()


if __name__ == "__main__":
    main()
