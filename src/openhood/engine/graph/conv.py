"""Convolution-network ops, channels last, each fast version next to its naive reference.

Activations are (N, H, W, C) float32: with channels last a 1×1 convolution is a plain GEMM
on the (N*H*W, C) rows with no copy at all, and the depthwise kernel's inner loop runs over
contiguous channels (see ``engine.kernels.conv_kernels``). The ``*_naive`` functions are the
definition (float64, written as the formula reads) and serve the tests only.

Convolution strategy (``conv2d``):
- 1×1, stride 1 (every expand/project/head conv of EfficientNet, ~85% of its FLOPs): the
  activation already IS the GEMM's left operand, so one BLAS sgemm, then the epilogue.
- k×k (the stem's 3×3/2 over 3 channels): where the host has AVX2+FMA and Cout is a multiple
  of 16, ``depthwise_simd.dense_kernel`` per block of output rows, from a zero-padded copy of
  the band's input (4 pixels × 16 output channels in 8 FMA accumulators, each tap an input
  float broadcast against a row of the weight; bias + clip before the one store). Else im2col
  per block of output rows + sgemm. Stem at batch 32, one thread, best of 5: im2col + sgemm +
  epilogue 40 ms (im2col 18, sgemm 16 at 43 GFLOP/s: K = 27 is too short for OpenBLAS, and
  the 27-wide patches are written and read back), SIMD kernel 14 ms. (An earlier numba loop
  nest, Cout innermost, lost to im2col + sgemm 17.3 vs 6.7 ms at batch 8: one dependency
  chain per vector, as in the depthwise kernel.)
- depthwise: ``depthwise_conv`` / ``depthwise_rows`` (the interior pixels through the SIMD
  kernel of ``engine.kernels.depthwise_simd``, the border through the numba kernel, or everything
  through the SIMD kernel from a zero-padded copy on small maps; im2col would copy every value
  KH*KW times to feed a GEMM with a reduction of length KH*KW only).
- a whole inverted-residual block (expand 1×1 → depthwise → project 1×1, ``mbconv``): the three
  run tile by tile through two per-thread L2-sized scratch buffers, so the 6x-wide hidden
  activations are never written to memory (see ``mbconv``). Its 1×1 convs (and the head's) run
  ``engine.kernels.pointwise_simd`` (packed-panel GEMM, bias + residual + clip in the store) where the
  width is a multiple of 16; the expand writes straight into a zero-padded band, so the
  depthwise conv has no border pixels (``EXPAND_INTO_PADDED``). ``engine.graph.mbconv_plan`` builds on
  this module: a block of at most ``mbconv_plan.PLAN_MAX_TILES`` tiles (batch 1) makes none of
  these calls from Python there, but has them prepared once per shape and buffer addresses, each
  thread's share one native call (``engine.kernels.call_list``); the executor calls it, and it falls
  back to ``mbconv`` here.

Padding is TensorFlow's SAME (``same_padding``): output = ceil(input / stride) and the odd
pixel of padding goes at the bottom/right, which is what EfficientNet's TF-trained weights
expect (PyTorch's symmetric padding would shift every stride-2 layer by half a pixel).

Fused epilogue: bias (a folded BatchNorm), optional residual, then clip to the activation's
bounds (ReLU6 = [0, 6]) in one pass over the GEMM output, row range per thread.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

import numpy as np

from openhood.engine.kernels import conv_kernels, depthwise_simd, pointwise_simd
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.parallel import RowSplitter

# Multiply-adds below which a conv stays on the calling thread. At 2^22 every batch-1 block of
# Lite0 (10-33 M multiply-adds) and the head (63 M, split by output channel) run on both threads;
# batch 32 splits every layer whatever the value. With ThreadPoolExecutor hand-offs 2^26 (batch 1
# on one thread) won the median on the loaded VM (11.1 vs 22.3 ms); with RowSplitter's own threads,
# which drop a share no thread has started (engine.kernels.parallel), 2^22 won it in 3 of 4 runs on the
# loaded VM: batch-1 pass, two threads, alternating, 80 rounds, median ms 2^26 / 2^22
# (benchmarks/split_threshold.py, 4 Dec, load average 1.3-2.1): 16:52 19.94 / 16.25, 16:57
# 15.91 / 17.66, 22.46 / 20.15, 22.99 / 19.84 (2^20 within 0.4 ms of 2^22 each time).
MIN_PARALLEL_CONV = 1 << 22

# Multiply-adds per chunk of the SIMD dense conv (the stem) when its rows are split over threads:
# ~20 µs chunks (4 rows of 112, from ``block_rows``) spent as long in Python (scratch,
# fill_padded) as in the kernel, and the two threads queued on the GIL. Stem alone, two
# threads, median: batch 32 37.4 → 22.7 ms; batch 1 split from 2^20 1.19 → 0.77 ms (0.60 ms
# on one thread: the kernel is FMA-bound and this VM's two vCPUs share one core's FMA units).
DIRECT_CHUNK_MACS = 1 << 21
# activation name → (lo, hi) of the clip that implements it in the fused epilogue.
ACTIVATION_BOUNDS = {None: (-math.inf, math.inf), "relu": (0.0, math.inf), "relu6": (0.0, 6.0)}
_NO_RESIDUAL = np.empty((0, 0), dtype=np.float32)
_NO_CLIP_LO, _NO_CLIP_HI = np.float32(-math.inf), np.float32(math.inf)
# Scratch of one fused inverted-residual tile (expanded input band + depthwise output), float32
# bytes. More than this host's L2 (512 KiB per core), yet measured best: whole pass, one thread,
# batch 32 (loaded VM): 256 KB 984 ms, 512 KB 594, 1 MB 506, 1.5 MB 478, 2 MB 455, 3 MB 444,
# 4 MB 446, 8 MB 470 (smaller tiles mean shorter GEMMs, more halo rows, more Python per pixel).
# With the pointwise_simd / padded-expand tiles (4 Dec, same process, alternating, medians):
# batch 32 two threads 1.5 → 3 MB 1.047× and 1.034× (6 MB 0.93×, 12 MB 0.79×, 768 KB 0.77×),
# batch 1 one thread 1.011× and 1.045×.
MBCONV_TILE_BYTES = 3072 * 1024
# The interior pixels of a depthwise conv through ``engine.kernels.depthwise_simd`` (when the host has
# AVX2+FMA and the channels are a multiple of 16); False: the numba kernel does every pixel.
SIMD_DEPTHWISE = True
# A k×k dense conv (the stem) through ``depthwise_simd.dense_kernel`` (no im2col, bias + clip
# fused) when the host has AVX2+FMA and Cout is a multiple of 16; False: im2col + sgemm.
SIMD_DENSE = True
# An expand 1×1 conv that ``pointwise_simd`` does not take (SIMD_POINTWISE off, a width not a
# multiple of 16) over at most this many input channels runs ``depthwise_simd.dense_kernel``
# (bias + ReLU6 fused, no second pass over the tile) instead of sgemm + epilogue: OpenBLAS is
# weakest at such short reductions. (pointwise_simd's 6×16 tile beat it in situ, whole pass, one
# thread, same process: batch 1 14.91 → 14.67 ms, batch 32 443 → 429 ms.) Whole mbconv, one thread, batch 8, best of 15 (sgemm → SIMD):
# 112²×16→96 3×3/2 12.9 → 11.2 ms, 56²×24→144 3×3 10.7 → 10.3, 56²×24→144 5×5/2 11.3 → 8.1,
# 28²×40→240 5×5 6.31 → 6.28, 28²×40→240 3×3/2 3.46 → 3.28; 14²×80→480 3.92 vs 3.96 and
# 14²×112→672 8.1 vs 9.6: from Cin = 80 sgemm is as fast or faster.
DENSE_EXPAND_MAX_CIN = 40
# 1×1 convs (MBConv expand/project over > DENSE_EXPAND_MAX_CIN inputs, the head) whose output
# width is a multiple of 16 through ``pointwise_simd`` (packed panels, 6×16 register tile, bias
# + residual + clip before the store) instead of sgemm + a second pass for the epilogue.
SIMD_POINTWISE = True
# An MBConv expand through ``pointwise_simd`` writes its tile straight into a zero-padded band
# (the image rows w pixels apart, the pad columns and out-of-image rows zeroed), so the
# depthwise conv runs every pixel through the SIMD interior kernel with no border pass (numba)
# and no padded copy (``fill_padded``); False: expand into a plain tile, then ``depthwise_rows``.
# The rows go through a table of offsets (``_padded_rows``), so the GEMM keeps its 96-row chunks
# (one call per image row re-streamed the weights and ran a 1-row tail per 7-pixel row: slower).
# Whole pass, same process, alternating: batch 1 one thread 15.50 → 14.26 ms, batch 32 two
# threads 294 → 277 ms, one thread 445 → 412 ms.
EXPAND_INTO_PADDED = True
# Below this share of interior pixels (window inside the image) a fused block's depthwise pads
# its tile and runs every pixel through the SIMD kernel (5×5 at 28×28 and smaller; see depthwise_rows).
PAD_BELOW = 0.8


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF SAME padding of one axis → (before, after): out = ceil(size / stride), extra pixel after.

    >>> same_padding(224, 3, 2), same_padding(56, 5, 2), same_padding(7, 5, 1)
    ((0, 1), (1, 2), (2, 2))
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def same_geometry(x_shape: tuple[int, ...], k: int, stride: int) -> tuple[int, int, int, int]:
    """A k×k SAME conv of x (N, H, W, C): (pad top, pad left, OH, OW).

    >>> same_geometry((1, 56, 56, 8), 5, 2)
    (1, 1, 28, 28)
    """
    (pt, _), (pl, _) = same_padding(x_shape[1], k, stride), same_padding(x_shape[2], k, stride)
    return pt, pl, -(-x_shape[1] // stride), -(-x_shape[2] // stride)


def _bounds(activation: str | None) -> tuple[np.float32, np.float32]:
    lo, hi = ACTIVATION_BOUNDS[activation]
    return np.float32(lo), np.float32(hi)


# ---------------------------------------------------------------- naive references (float64)


def _pad_same(x: np.ndarray, kh: int, kw: int, stride: int) -> np.ndarray:
    rows, cols = same_padding(x.shape[1], kh, stride), same_padding(x.shape[2], kw, stride)
    return np.pad(np.asarray(x, dtype=np.float64), ((0, 0), rows, cols, (0, 0)))


def conv2d_naive(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: int) -> np.ndarray:
    """x (N, H, W, Cin), weight (KH, KW, Cin, Cout), SAME padding → (N, OH, OW, Cout)."""
    kh, kw = weight.shape[:2]
    xp = _pad_same(x, kh, kw, stride)
    oh, ow = -(-x.shape[1] // stride), -(-x.shape[2] // stride)
    out = np.zeros((x.shape[0], oh, ow, weight.shape[3]))
    for a in range(kh):
        for b in range(kw):  # out[n, i, j] += xpad[n, i*s + a, j*s + b] @ W[a, b]
            out += xp[:, a : a + stride * oh : stride, b : b + stride * ow : stride, :] @ np.asarray(
                weight[a, b], np.float64
            )
    return out if bias is None else out + bias


def depthwise_conv_naive(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: int) -> np.ndarray:
    """x (N, H, W, C), weight (KH, KW, C): one filter per channel, SAME padding → (N, OH, OW, C)."""
    kh, kw = weight.shape[:2]
    xp = _pad_same(x, kh, kw, stride)
    oh, ow = -(-x.shape[1] // stride), -(-x.shape[2] // stride)
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for a in range(kh):
        for b in range(kw):
            out += xp[:, a : a + stride * oh : stride, b : b + stride * ow : stride, :] * weight[a, b]
    return out if bias is None else out + bias


def mbconv_naive(
    x: np.ndarray,
    expand: np.ndarray | None,
    expand_bias: np.ndarray | None,
    dw: np.ndarray,
    dw_bias: np.ndarray,
    stride: int,
    project: np.ndarray,
    project_bias: np.ndarray,
    residual: np.ndarray | None,
) -> np.ndarray:
    """An inverted-residual block as its three convs: ReLU6(expand 1×1) → ReLU6(depthwise) →
    project 1×1 (+ residual). expand (Cin, hidden) or None, dw (KH, KW, hidden), project (hidden, Cout)."""
    h = x if expand is None else relu6_naive(conv2d_naive(x, expand[None, None], expand_bias, 1))
    h = relu6_naive(depthwise_conv_naive(h, dw, dw_bias, stride))
    y = conv2d_naive(h, project[None, None], project_bias, 1)
    return y if residual is None else y + residual


def batchnorm_naive(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray, eps: float
) -> np.ndarray:
    """Inference BatchNorm over the last (channel) axis."""
    x = np.asarray(x, dtype=np.float64)
    return np.asarray((x - mean) / np.sqrt(np.asarray(var, np.float64) + eps) * gamma + beta)


def relu6_naive(x: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(np.asarray(x, dtype=np.float64), 0.0), 6.0)


def global_avg_pool_naive(x: np.ndarray) -> np.ndarray:
    """(N, H, W, C) → (N, C)."""
    return np.asarray(np.asarray(x, dtype=np.float64).mean(axis=(1, 2)))


def fold_batchnorm_naive(
    weight: np.ndarray,
    bias: np.ndarray | None,
    gamma: np.ndarray,
    beta: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    eps: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Conv weight (..., Cout) and bias (Cout,) or None with BN after it → one conv (float64):
    W·γ/√(σ²+ε) and (b − μ)·γ/√(σ²+ε) + β."""
    scale = np.asarray(gamma, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    b = np.zeros_like(scale) if bias is None else np.asarray(bias, np.float64)
    return np.asarray(weight, np.float64) * scale, (b - mean) * scale + beta


# ---------------------------------------------------------------- fast kernels (float32)


def _check(x: np.ndarray) -> np.ndarray:
    if x.dtype != np.float32 or x.ndim != 4 or not x.flags.c_contiguous:
        raise TypeError(
            f"expected a C-contiguous (N, H, W, C) float32 array, got {x.dtype} {x.shape} (C-contiguous: {x.flags.c_contiguous})"
        )
    return x


def output_shape(x_shape: tuple[int, ...], kernel: int, stride: int, cout: int) -> tuple[int, int, int, int]:
    """(N, H, W, Cin) → the SAME conv's (N, OH, OW, Cout): OH = ceil(H / stride) whatever the kernel."""
    n, h, w, _ = x_shape
    return n, -(-h // stride), -(-w // stride), cout


def output(x: np.ndarray, stride: int, cout: int, out: np.ndarray | None) -> np.ndarray:
    """The (N, OH, OW, Cout) array a conv of x writes: ``out`` checked, or a new one."""
    shape = output_shape(x.shape, 1, stride, cout)
    if out is None:
        return np.empty(shape, dtype=np.float32)
    if out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {shape}, got {out.dtype} {out.shape}")
    return out


def conv2d(
    x: np.ndarray,
    linear: Linear,
    kernel: int,
    stride: int,
    splitter: RowSplitter,
    activation: str | None = None,
    residual: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """x (N, H, W, Cin) → (N, OH, OW, Cout): SAME conv as GEMMs with ``linear`` (KH*KW*Cin, Cout),
    bias + residual + activation applied to each block of output rows right after its GEMM;
    written into ``out`` when given (e.g. a ``BufferPool`` buffer), else into a new array.

    The threads take blocks of about ``block_rows(...)`` output pixels in turn (dynamic
    chunks, so a thread the OS parks stalls one block, not half the conv): (im2col of the block →) one single-threaded sgemm into
    the output → the epilogue while the block is still in L2. The activation is never read
    back from memory for the epilogue. BLAS must be single-threaded on the calling thread (the
    Executor pins it for graphs with ``meta["blas_threads"] = 1``; RowSplitter's workers are).
    """
    n, h, w, c = _check(x).shape
    cout = linear.out_features
    pointwise = kernel == 1 and stride == 1
    if pointwise:
        oh, ow, pt, pl = h, w, 0, 0
        pixels = x.reshape(n * h * w, c)  # (M, Cin): channels last makes this a view
    else:
        pt, pl, oh, ow = same_geometry(x.shape, kernel, stride)
    depth = linear.in_features  # Cin, or KH*KW*Cin for the patches
    result = output(x, stride, cout, out)
    y = result.reshape(n * oh * ow, cout)  # (M, Cout): a view
    res = None if residual is None else residual.reshape(-1, cout)
    b = linear.bias if linear.bias is not None else np.zeros(cout, dtype=np.float32)
    lo, hi = _bounds(activation)
    # Work unit: one output image row (OW pixels), so im2col and the GEMM see the same rows.
    step = max(1, block_rows(depth, cout) // ow)
    fn = None
    weight = linear.weight  # (KH*KW*Cin, Cout)
    if (
        not pointwise
        and SIMD_DENSE
        and residual is None
        and cout % depthwise_simd.CHANNELS == 0
        and weight.dtype == np.float32
        and weight.flags.c_contiguous
    ):
        fn = depthwise_simd.dense_kernel(kernel, kernel * c)
    if fn is not None:  # direct() takes any rows: chunks big enough to outweigh their Python glue
        step = max(step, -(-DIRECT_CHUNK_MACS // (ow * cout * depth)))

    def direct(r0: int, r1: int) -> None:
        """Output rows [r0, r1) (over N*OH) through the SIMD dense kernel, image by image, from
        a zero-padded copy of their input band (the im2col patches are never written)."""
        assert fn is not None
        r = r0
        while r < r1:
            n, i0 = divmod(r, oh)
            i1 = min(oh, i0 + r1 - r)
            r += i1 - i0
            ph, pw = (i1 - i0 - 1) * stride + kernel, (ow - 1) * stride + kernel  # padded band
            xp = splitter.scratch("conv.padded", (ph, pw, c))
            fill_padded(xp, x[n], i0 * stride - pt, pl, h)
            depthwise_simd.dense(fn, xp, weight, b, result[n, i0:i1], stride, lo, hi)

    pw = _pointwise_kernel(linear) if pointwise else None
    macs = n * oh * ow * cout * depth
    threads = splitter.threads
    if pw is not None and n * oh <= step and threads > 1 and macs >= MIN_PARALLEL_CONV and cout % (16 * threads) == 0:
        # Too few rows to share (the head at batch 1: 7 rows of 7×7×320 → 1280): the threads
        # take the output channels instead, each a slice of the packed panels.
        part = cout // threads

        def columns(s: int, e: int) -> None:
            c0, c1 = s * part, e * part
            r = None if res is None else res[:, c0:c1]
            pw[0](*pointwise_simd.pointwise_args(pixels, pw[1], b, y[:, c0:c1], lo, hi, r, c0))

        splitter.run_chunks(columns, threads, 1, macs, 0)
        return result

    def work(r0: int, r1: int) -> None:
        if fn is not None:
            direct(r0, r1)
            return
        for u0 in range(r0, r1, step):
            u1 = min(u0 + step, r1)
            p0, p1 = u0 * ow, u1 * ow  # output pixel rows of this block
            if pw is not None:
                r = None if res is None else res[p0:p1]
                pw[0](*pointwise_simd.pointwise_args(pixels[p0:p1], pw[1], b, y[p0:p1], lo, hi, r))
                continue
            if pointwise:
                src = pixels[p0:p1]
            else:
                src = splitter.scratch("patches", (p1 - p0, depth))
                conv_kernels.im2col_rows(x, src, oh, ow, stride, pt, pl, kernel, kernel, u0, u1)
            out = y[p0:p1]
            linear.matmul(src, out=out)
            conv_kernels.bias_act_rows(out, b, _NO_RESIDUAL if res is None else res[p0:p1], lo, hi)

    splitter.run_chunks(work, n * oh, step, ow * cout * depth, MIN_PARALLEL_CONV)
    return result


def _pointwise_kernel(linear: Linear | None) -> tuple[Callable[..., None], np.ndarray] | None:
    """(``pointwise_simd``'s kernel, ``linear``'s packed panels) when its 1×1 conv should run
    there (see SIMD_POINTWISE), else None."""
    fn = pointwise_simd.kernel()
    if linear is None or fn is None or not SIMD_POINTWISE or not pointwise_simd.suits(linear):
        return None
    return fn, pointwise_simd.panels(linear)


# id(scratch buffer) → (a weak reference to it, the padded-band geometry whose pads it holds as zeros)
_zeroed_pads: dict[int, tuple[weakref.ref[np.ndarray], tuple[object, ...]]] = {}


def _zero_pads(hp: np.ndarray, ra: int, rb: int, pl: int, w: int) -> None:
    """Zero what lies outside rows [ra, rb) × columns [pl, pl + w) of the padded band ``hp``
    (images, PH, PW, C), unless this scratch buffer last held a band of the same geometry: the
    expand writes inside that rectangle only, so its pads are still zero (~330 KB per 7×7×1152
    5×5 tile otherwise: 2.3% of a batch-1 pass). Any other geometry re-zeroes and takes over."""
    base = hp.base if hp.base is not None else hp
    geometry = (hp.shape, hp.strides, hp.__array_interface__["data"][0], ra, rb, pl, w)
    seen = _zeroed_pads.get(id(base))
    if seen is not None and seen[0]() is base and seen[1] == geometry:
        return
    hp[:, :ra] = 0.0
    hp[:, rb:] = 0.0
    hp[:, ra:rb, :pl] = 0.0
    hp[:, ra:rb, pl + w :] = 0.0
    _zeroed_pads[id(base)] = (weakref.ref(base), geometry)


_padded_rows_cache: dict[tuple[int, ...], np.ndarray] = {}


def _padded_rows(images: int, rows: int, w: int, ph: int, pw: int, ra: int, pl: int, c: int) -> np.ndarray:
    """(images·rows·w,) int64: where pixel (image, row, column) of a tile's input rows goes in a
    zero-padded band (images, ph, pw, c), in floats: ((image·ph + ra + row)·pw + pl + column)·c.
    Cached per geometry (a model has a few dozen)."""
    key = (images, rows, w, ph, pw, ra, pl, c)
    table = _padded_rows_cache.get(key)
    if table is None:
        img = np.arange(images, dtype=np.int64)[:, None, None] * ph
        row = np.arange(ra, ra + rows, dtype=np.int64)[None, :, None]
        col = np.arange(pl, pl + w, dtype=np.int64)[None, None, :]
        table = (((img + row) * pw + col) * c).reshape(-1)
        if len(_padded_rows_cache) < 1024:
            _padded_rows_cache[key] = table
    return table


def block_rows(depth: int, cout: int) -> int:
    """Output pixels per GEMM block: input (rows, depth) + output (rows, Cout) float32 ≈ 128 KB,
    so both stay in L2 between the GEMM and its epilogue; at least 64 rows for GEMM efficiency."""
    return max(64, (128 * 1024 // 4) // (depth + cout))


def fill_padded(xp: np.ndarray, x: np.ndarray, top: int, left: int, h: int, x_row0: int = 0) -> None:
    """Fill ``xp`` (..., PH, PW, C), a zero-padded window over an image of ``h`` rows, from ``x``
    (..., rows, W, C), whose row 0 is image row ``x_row0``: ``xp``'s row 0 is image row ``top``
    (negative above the image), its column ``left`` is image column 0; zeros where it falls
    outside the image. Every position is written once, so ``xp`` may be reused scratch."""
    ph, pw = xp.shape[-3], xp.shape[-2]
    ra, rb = max(0, -top), min(ph, h - top)  # xp rows inside the image
    ca, cb = left, min(pw, left + x.shape[-2])  # xp columns inside the image
    xp[..., :ra, :, :] = 0.0
    xp[..., rb:, :, :] = 0.0
    xp[..., ra:rb, :ca, :] = 0.0
    xp[..., ra:rb, cb:, :] = 0.0
    xp[..., ra:rb, ca:cb, :] = x[..., top + ra - x_row0 : top + rb - x_row0, : cb - ca, :]


def depthwise_rows(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    stride: int,
    pad_top: int,
    pad_left: int,
    lo: np.float32,
    hi: np.float32,
    x_row0: int,
    h: int,
    out_row0: int,
    c0: int,
    r0: int,
    r1: int,
    scratch: Callable[[str, tuple[int, ...]], np.ndarray] | None = None,
) -> None:
    """Output rows [r0, r1) (over N*OHX) of a depthwise conv, the arguments of
    ``conv_kernels.depthwise``: the interior pixels (window inside the image) through the SIMD
    kernel of ``engine.kernels.depthwise_simd``, the border ones through the numba kernel.

    Small maps are mostly border (a 5×5 filter on 7×7: 40 of 49 pixels), which the numba
    kernel runs at a third of the SIMD speed; there, when [r0, r1) is whole images and a
    per-thread ``scratch`` is given, the input is first copied into a zero-padded buffer and
    every pixel runs the SIMD kernel (the copy is 1 float per 9 or 25 multiply-adds)."""
    k, c, oh, ow = weight.shape[0], x.shape[3], out.shape[1], out.shape[2]
    numba_kernel = conv_kernels.depthwise(k)
    fn = depthwise_simd.kernel(k) if SIMD_DEPTHWISE and c % depthwise_simd.CHANNELS == 0 else None
    j0, j1 = depthwise_simd.interior_columns(x.shape[2], k, stride, pad_left)
    i0, i1 = depthwise_simd.interior_rows(out_row0, oh, h, k, stride, pad_top)
    interior_share = max(0, j1 - j0) * max(0, i1 - i0) / (oh * ow)
    if fn is not None and scratch is not None and interior_share < PAD_BELOW and r0 % oh == 0 and r1 % oh == 0:
        n0, n1 = r0 // oh, r1 // oh
        ph, pw = (oh - 1) * stride + k, (ow - 1) * stride + k  # padded rows and columns the windows read
        xp = scratch("depthwise.padded", (n1 - n0, ph, pw, c))
        fill_padded(xp, x[n0:n1], out_row0 * stride - pad_top, pad_left, h, x_row0)
        dst = out[n0:n1]
        fn(*depthwise_simd.interior_args(xp, weight, bias, dst, stride, lo, hi, c0, (0, n1 - n0), (0, oh), (0, ow)))
        return
    if fn is None or j0 >= j1 or i0 >= i1:
        numba_kernel(x, weight, bias, out, stride, pad_top, pad_left, lo, hi, x_row0, h, out_row0, c0, r0, r1, 0, 0)
        return
    numba_kernel(x, weight, bias, out, stride, pad_top, pad_left, lo, hi, x_row0, h, out_row0, c0, r0, r1, j0, j1)
    cols = (j0, j1)
    origin = (out_row0 * stride - pad_top - x_row0, -pad_left)  # x's row and column of out[0, 0]'s window
    n, last = r0 // oh, (r1 - 1) // oh
    while n <= last:  # images cut by [r0, r1) one by one, the whole ones between them in one call
        a, b = max(r0 - n * oh, 0), min(r1 - n * oh, oh)  # this image's rows in the range
        whole = n + 1
        if a == 0 and b == oh:
            while whole <= last and (whole + 1) * oh <= r1:
                whole += 1
        rows = (max(a, i0), min(b, i1))
        if rows[0] < rows[1]:
            images = (n, whole)
            fn(*depthwise_simd.interior_args(x, weight, bias, out, stride, lo, hi, c0, images, rows, cols, *origin))
        n = whole


def depthwise_conv(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: int,
    splitter: RowSplitter,
    activation: str | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """x (N, H, W, C), weight (KH, KW, C) → (N, OH, OW, C), SAME padding, bias + activation fused
    (into ``out`` when given)."""
    n, h, w, c = _check(x).shape
    kh, kw = weight.shape[:2]
    if kh != kw:
        raise ValueError(f"depthwise filters must be square, got {kh}x{kw}")
    (pt, _), (pl, _) = same_padding(h, kh, stride), same_padding(w, kw, stride)
    oh, ow = -(-h // stride), -(-w // stride)
    out = output(x, stride, c, out)
    b = bias if bias is not None else np.zeros(c, dtype=np.float32)
    lo, hi = _bounds(activation)
    chunk = max(1, 32768 // (ow * c))  # output image rows per chunk: ~128 KB of output
    splitter.run_chunks(
        lambda s, e: depthwise_rows(x, weight, b, out, stride, pt, pl, lo, hi, 0, h, 0, 0, s, e),
        n * oh,
        chunk,
        ow * c * kh * kw,
        MIN_PARALLEL_CONV,
    )
    return out


def mbconv_tiling(x_shape: tuple[int, ...], k: int, stride: int, hidden: int) -> tuple[int, int, int]:
    """How ``mbconv`` cuts (N, H, W, Cin) into tiles: (images per tile, output rows per band,
    bands per image). A tile is a group of whole images when one image's hidden maps (input and
    depthwise output, ``hidden`` channels) fit ``MBCONV_TILE_BYTES``, else a band of one image's
    output rows whose input band ((rows-1)*stride + k rows) and output fit it."""
    _, h, w, _ = x_shape
    oh, ow = -(-h // stride), -(-w // stride)
    image_bytes = 4 * hidden * (h * w + oh * ow)
    if image_bytes <= MBCONV_TILE_BYTES:
        return max(1, MBCONV_TILE_BYTES // image_bytes), oh, 1
    rows = max(1, (MBCONV_TILE_BYTES // (4 * hidden) - (k - stride) * w) // (stride * w + ow))
    rows = -(-oh // -(-oh // rows))  # same count of bands, evenly sized
    return 1, rows, -(-oh // rows)


def tile_rows(
    t: int, n: int, h: int, k: int, stride: int, pad_top: int, oh: int, per_tile: int, rows: int, bands: int
) -> tuple[int, int, int, int, int, int]:
    """Tile ``t`` of ``mbconv_tiling`` → its images [n0, n1), output rows [i0, i1) and the input
    rows [a0, a1) that those read (halo included, clipped to the image)."""
    n0, band = (t // bands) * per_tile, t % bands
    n1 = min(n0 + per_tile, n)
    i0, i1 = band * rows, min(band * rows + rows, oh)
    a0, a1 = max(0, i0 * stride - pad_top), min(h, (i1 - 1) * stride - pad_top + k)
    return n0, n1, i0, i1, a0, a1


def mbconv_macs(x_shape: tuple[int, ...], k: int, stride: int, hidden: int, cout: int, expands: bool) -> int:
    """Multiply-adds of one inverted-residual block on x (N, H, W, Cin): expand (if any), the
    k×k depthwise and the project; what decides whether its work is split over threads.

    >>> mbconv_macs((1, 4, 4, 2), 3, 1, 12, 3, True)  # 16 px x (2 x 12 expand + 12 x (9 + 3))
    2688
    """
    n, h, w, cin = x_shape
    oh, ow = -(-h // stride), -(-w // stride)
    return n * (h * w * cin * hidden * expands + oh * ow * hidden * (k * k + cout))


def mbconv(
    x: np.ndarray,
    expand: Linear | None,
    dw: np.ndarray,
    dw_bias: np.ndarray,
    stride: int,
    project: Linear,
    splitter: RowSplitter,
    residual: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """One inverted-residual block in one pass: x (N, H, W, Cin) → (N, OH, OW, Cout).

    ReLU6(x @ expand + b) → ReLU6(depthwise k×k, stride) → @ project + b (+ residual), computed
    tile by tile so the expanded (hidden-wide, 6x Cin) activations never leave L2: a tile is a
    group of whole images when one image's hidden maps fit ``MBCONV_TILE_BYTES``, else a band
    of output rows of one image (the band's input rows, halo included, are expanded again by
    the next band: ≤ 12% extra expand work at Lite0's sizes). Per tile: expand GEMM into a
    per-thread scratch + bias/ReLU6 (at most ``DENSE_EXPAND_MAX_CIN`` input channels: the SIMD
    dense kernel, bias and clip fused) → depthwise (bias, ReLU6 fused) into a second scratch →
    project GEMM straight into the output rows + bias/residual. Threads take tiles in turn.

    When all the images make one tile (batch 1 from 28×28 on) the threads split the hidden
    channels instead: each expands, filters and projects its own channels (the depthwise is
    per channel, so nothing crosses), and the partial projections are summed before the
    epilogue. ``expand`` None: the block has no expansion (Lite0's first), the depthwise reads x.
    ``expand`` and ``project`` are float ``Linear`` layers (their weights are sliced by channel).
    """
    n, h, w, cin = _check(x).shape
    k, hidden, cout = dw.shape[0], dw.shape[2], project.out_features
    pt, pl, oh, ow = same_geometry(x.shape, k, stride)
    result = output(x, stride, cout, out)
    y = result.reshape(n * oh * ow, cout)  # (M, Cout)
    res = _NO_RESIDUAL if residual is None else residual.reshape(-1, cout)
    lo, hi = _bounds("relu6")
    e_bias = expand.bias if expand is not None and expand.bias is not None else np.zeros(hidden, dtype=np.float32)
    p_bias = project.bias if project.bias is not None else np.zeros(cout, dtype=np.float32)
    pw_expand = _pointwise_kernel(expand)  # expand through pointwise_simd when it suits
    dense_expand = None  # else through the SIMD dense kernel: short reductions only
    if (
        pw_expand is None
        and expand is not None
        and SIMD_DENSE
        and cin <= DENSE_EXPAND_MAX_CIN
        and expand.weight.dtype == np.float32
        and expand.weight.flags.c_contiguous
    ):
        dense_expand = depthwise_simd.dense_kernel(1, cin)
    pw_project = _pointwise_kernel(project)
    zero_bias, no_clip = np.zeros(cout, np.float32), (_NO_CLIP_LO, _NO_CLIP_HI)  # of a partial product
    # the depthwise kernel for an expand written into a zero-padded band (EXPAND_INTO_PADDED)
    padded_dw = depthwise_simd.kernel(k) if EXPAND_INTO_PADDED and SIMD_DEPTHWISE and pw_expand is not None else None
    per_tile, rows, bands = mbconv_tiling(x.shape, k, stride, hidden)
    tiles = -(-n // per_tile) * bands
    macs = mbconv_macs(x.shape, k, stride, hidden, cout, expand is not None)
    threads = splitter.threads

    def tile(t: int, c0: int, c1: int, dst: np.ndarray | None) -> None:
        """Tile t, hidden channels [c0, c1): its project GEMM into ``dst`` (a partial sum),
        or, when None, into the output rows followed by the epilogue."""
        n0, n1, i0, i1, a0, a1 = tile_rows(t, n, h, k, stride, pt, oh, per_tile, rows, bands)
        d = splitter.scratch("mbconv.depthwise", (n1 - n0, i1 - i0, ow, c1 - c0))
        whole_vectors = (c1 - c0) % depthwise_simd.CHANNELS == 0
        if padded_dw is not None and pw_expand is not None and whole_vectors:
            # expand straight into a zero-padded band: every depthwise pixel is an interior one
            c, top = c1 - c0, i0 * stride - pt  # top: the image row of the padded band's row 0
            ph, pw = (i1 - i0 - 1) * stride + k, (ow - 1) * stride + k
            hp = splitter.scratch("mbconv.padded", (n1 - n0, ph, pw, c))
            ra, rb = a0 - top, a1 - top  # hp rows inside the image
            _zero_pads(hp, ra, rb, pl, w)
            xrows = x[n0:n1, a0:a1].reshape(-1, cin)  # (pixels, Cin): whole images or one image's band
            at = _padded_rows(n1 - n0, a1 - a0, w, ph, pw, ra, pl, c)  # each pixel's place in hp
            pw_expand[0](*pointwise_simd.pointwise_args(xrows, pw_expand[1], e_bias, hp[0, 0], lo, hi, None, c0, at))
            band = (0, n1 - n0), (0, i1 - i0), (0, ow)
            padded_dw(*depthwise_simd.interior_args(hp, dw, dw_bias, d, stride, lo, hi, c0, *band))
        else:
            if expand is None:
                hid = x[n0:n1, a0:a1]  # (all channels: the no-expansion block never splits them)
            else:
                hid = splitter.scratch("mbconv.hidden", (n1 - n0, a1 - a0, w, c1 - c0))
                hid2 = hid.reshape(-1, c1 - c0)
                xrows = x[n0:n1, a0:a1].reshape(-1, cin)  # (pixels, Cin): whole images or one image's band
                if dense_expand is not None and whole_vectors:
                    depthwise_simd.dense(dense_expand, xrows[None], expand.weight, e_bias, hid2[None], 1, lo, hi, c0)
                elif pw_expand is not None and whole_vectors:
                    pw_expand[0](*pointwise_simd.pointwise_args(xrows, pw_expand[1], e_bias, hid2, lo, hi, None, c0))
                else:
                    np.matmul(xrows, expand.weight[:, c0:c1], out=hid2)  # (pixels, C1-C0)
                    conv_kernels.bias_act_rows(hid2, e_bias[c0:c1], _NO_RESIDUAL, lo, hi)
            depthwise_rows(
                hid, dw, dw_bias, d, stride, pt, pl, lo, hi, a0, h, i0, c0, 0, (n1 - n0) * (i1 - i0), splitter.scratch
            )
        if dst is not None:  # (pixels, Cout), the partial product over hidden channels [c0, c1)
            if pw_project is not None:
                src = d.reshape(-1, c1 - c0)
                pw_project[0](
                    *pointwise_simd.pointwise_args(src, pw_project[1], zero_bias, dst, *no_clip, None, 0, None, c0)
                )
            else:
                np.matmul(d.reshape(-1, c1 - c0), project.weight[c0:c1], out=dst)
            return
        p0, p1 = (n0 * oh + i0) * ow, ((n1 - 1) * oh + i1) * ow
        o = y[p0:p1]
        if pw_project is not None:
            r = res[p0:p1] if res.size else None
            src = d.reshape(-1, hidden)
            pw_project[0](*pointwise_simd.pointwise_args(src, pw_project[1], p_bias, o, _NO_CLIP_LO, _NO_CLIP_HI, r))
            return
        np.matmul(d.reshape(-1, hidden), project.weight, out=o)
        conv_kernels.bias_act_rows(o, p_bias, res[p0:p1] if res.size else res, _NO_CLIP_LO, _NO_CLIP_HI)

    if tiles == 1 and threads > 1 and expand is not None and macs >= MIN_PARALLEL_CONV:
        step = -(-hidden // (threads * 16)) * 16  # channels per thread, whole vectors
        parts = -(-hidden // step)
        partial = splitter.scratch("mbconv.partial", (parts, n * oh * ow, cout))
        splitter.run_chunks(lambda s, e: tile(0, s * step, min(e * step, hidden), partial[s]), parts, 1, macs, 0)
        np.sum(partial, axis=0, out=y)
        conv_kernels.bias_act_rows(y, p_bias, res, _NO_CLIP_LO, _NO_CLIP_HI)
        return result

    def work(t0: int, t1: int) -> None:
        for t in range(t0, t1):
            tile(t, 0, hidden, None)

    splitter.run_chunks(work, tiles, 1, macs // tiles, MIN_PARALLEL_CONV)
    return result


def batchnorm(x: np.ndarray, scale: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Unfused inference BatchNorm: a new (N, H, W, C) array x·scale + shift (scale = γ/√(σ²+ε),
    shift = β − μ·scale, per channel): the extra memory round trip that folding removes."""
    y: np.ndarray = x * scale
    y += shift
    return y


def relu6(x: np.ndarray) -> np.ndarray:
    """Unfused ReLU6 into a new array."""
    return np.asarray(np.clip(x, np.float32(0.0), np.float32(6.0)))


def global_avg_pool(x: np.ndarray) -> np.ndarray:
    """(N, H, W, C) → (N, C) float32 mean over the spatial positions."""
    n, h, w, c = x.shape
    return np.asarray(np.add.reduce(x.reshape(n, h * w, c), axis=1) * np.float32(1.0 / (h * w)))
