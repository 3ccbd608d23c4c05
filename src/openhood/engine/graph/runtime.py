"""Execute a ``Graph``: one kernel per op type, values freed after their last use.

Hidden states travel as 2-D (N, C) arrays with N = B*T rows (padding rows included), the layout
BLAS wants for ``x @ W``; ops that need (B, T, C) reshape views, never copies. Unfused ops
allocate their output (that extra memory round trip is exactly what fusion removes); fused ops
write into the matmul's own output. Each kernel also reports its arithmetic (``flops``) so the
profiler can put achieved GFLOP/s beside time. The trade-off: a Python call per node (~60
nodes per forward), negligible beside the GEMMs at any useful batch size.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from openhood.engine.graph import conv, mbconv_plan
from openhood.engine.graph.buffers import BufferPool
from openhood.engine.graph.graph import Graph, Node
from openhood.engine.graph.packing import TokenPacking
from openhood.engine.kernels import ops
from openhood.engine.kernels.blas import blas
from openhood.engine.kernels.parallel import RowSplitter

# Arithmetic per element of the compiled elementwise kernels (engine/kernels/numba_rows.py, an FMA counts
# 2, the bias add is counted by the caller): GELU's clamp + two Horner polynomials + divide,
# softmax's max + exp (range reduction + degree-7 polynomial) + sum + scale.
_ELEMENTWISE_FLOPS = {"Gelu": 27, "Relu": 1, "Softmax": 22, "Add": 1, "LayerNorm": 9}


@dataclass
class RunContext:
    batch: int
    seq: int
    splitter: RowSplitter
    buffers: BufferPool
    # Set when the batch runs padding-free (engine.graph.packing): hidden states are then (N, C), the
    # real tokens only, and the ops that need (B, T) (embeddings, attention, pooling) use it.
    packing: TokenPacking | None = None


class OpProfiler(Protocol):
    def record(self, node: Node, seconds: float, flops: int) -> None: ...


# A kernel: (node, context, *input arrays) → (output array, arithmetic of the call in FLOPs);
# the attention-mask bias is None when nothing is padded.
KernelResult = tuple[np.ndarray | None, int]
Kernel = Callable[..., KernelResult]

_ACTIVATION_KERNELS = {"gelu": ops.gelu_, "relu": ops.relu_, "softmax": ops.softmax_}
# A Linear's epilogue per output element: the bias add, then the activation's arithmetic.
_EPILOGUE_FLOPS: dict[str | None, int] = {None: 1}
_EPILOGUE_FLOPS.update({act: 1 + _ELEMENTWISE_FLOPS[act.capitalize()] for act in _ACTIVATION_KERNELS})


def k_linear(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
    """y = x @ W (one BLAS-threaded GEMM), then bias (+ activation) in place in the GEMM's output,
    split over the threads by the op itself.

    A layer with ``fused_forward`` (``panel_gemm.PanelLinear``) is asked first: product, bias and
    activation in one call on its register tiles; it returns None when the call is not its own.

    Measured alternative, rejected: row-blocked GEMM with the epilogue right after each block
    on the same thread (oneDNN style) ran ~12% slower here: single-threaded BLAS on
    ~40-row blocks is less efficient than one 2-thread GEMM over all rows.
    """
    lin = node.linear
    act = node.attrs.get("activation")
    n = x.shape[0]
    fused = getattr(lin, "fused_forward", None)  # a layer that runs the whole epilogue in its own kernel
    if fused is not None and (y := fused(x, act)) is not None:
        return y, lin.flops(n) + y.size * _EPILOGUE_FLOPS[act]
    flops = lin.flops(n) + n * lin.out_features * _EPILOGUE_FLOPS[act]
    y = lin.matmul(x)  # (N, out)
    if act is not None:
        _ACTIVATION_KERNELS[act](y, ctx.splitter, bias=lin.bias)
    elif lin.bias is not None:
        ops.add_(y, lin.bias, ctx.splitter)
    return y, flops


def k_linear_add_layernorm(node: Node, ctx: RunContext, x: np.ndarray, residual: np.ndarray) -> KernelResult:
    p = node.params
    lin = node.linear
    y = lin.matmul(x)  # (N, out)
    ops.layernorm_(y, p["gamma"], p["beta"], node.attrs["eps"], ctx.splitter, residual=residual, bias=lin.bias)
    return y, lin.flops(x.shape[0]) + y.size * (2 + _ELEMENTWISE_FLOPS["LayerNorm"])


def k_embeddings(node: Node, ctx: RunContext, input_ids: np.ndarray) -> KernelResult:
    p = node.params
    b, t = ctx.batch, ctx.seq
    c = p["word"].shape[1]
    if t > p["position"].shape[0]:
        raise ValueError(f"sequence length {t} exceeds the model's {p['position'].shape[0]} positions")
    packing = ctx.packing
    if packing is not None:  # (N, C): the real tokens, each at its own column's position id
        rows = np.take(p["word"], np.asarray(input_ids).reshape(-1)[packing.rows], axis=0)
        rows += p["position"][packing.positions]
        rows += p["token_type"][0]
        return rows, 2 * rows.size
    out = np.empty((b, t, c), dtype=np.float32)
    np.take(p["word"], input_ids, axis=0, out=out)  # (B, T, C) gather
    out += p["position"][:t] + p["token_type"][0]  # single-segment input: token type 0
    return out.reshape(b * t, c), 2 * out.size


def k_layernorm(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
    y = x.copy()
    ops.layernorm_(y, node.params["gamma"], node.params["beta"], node.attrs["eps"], ctx.splitter)
    return y, y.size * _ELEMENTWISE_FLOPS["LayerNorm"]


def k_add(node: Node, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> KernelResult:
    return np.add(a, b), a.size


def _unary(kernel: Callable[[np.ndarray, RowSplitter], object], label: str) -> Kernel:
    def run(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
        y = x.copy()
        kernel(y, ctx.splitter)
        return y, y.size * _ELEMENTWISE_FLOPS[label]

    return run


def k_attention_mask(node: Node, ctx: RunContext, attention_mask: np.ndarray) -> KernelResult:
    return ops.attention_mask_bias(attention_mask), attention_mask.size


def k_attention(node: Node, ctx: RunContext, *args: np.ndarray) -> KernelResult:
    b, t = ctx.batch, ctx.seq
    heads = node.attrs["heads"]
    packing = ctx.packing
    if packing is not None:
        # (N, ·) rows → a zeroed (B*T, ·) padded copy (padding keys are masked, but 0 x NaN from
        # uninitialised memory would not be), the padded kernel, then the N real rows back.
        *qkv_rows, bias = args
        padded = [packing.unpack(a) for a in qkv_rows]
        out_padded, flops = k_attention(node, RunContext(b, t, ctx.splitter, ctx.buffers), *padded, bias)
        assert out_padded is not None  # attention always returns its context
        return packing.pack(out_padded), flops
    if len(args) == 2:  # packed (N, 3C) from a merged QKV projection
        qkv, bias = args
        c = qkv.shape[1] // 3
        qkv3 = qkv.reshape(b, t, 3 * c)
        q, k, v = qkv3[:, :, :c], qkv3[:, :, c : 2 * c], qkv3[:, :, 2 * c :]
    else:
        q, k, v, bias = args
        c = q.shape[1]
        q, k, v = (a.reshape(b, t, c) for a in (q, k, v))
    out = np.empty((b, t, c), dtype=np.float32)
    ops.attention_(q, k, v, bias, heads, node.attrs["scale"], out, ctx.splitter)
    scores = b * heads * t * t
    return out.reshape(b * t, c), 4 * scores * (c // heads) + (
        2 + _ELEMENTWISE_FLOPS["Softmax"]
    ) * scores  # QK, PV; scale+mask, softmax


def k_mean_pool(node: Node, ctx: RunContext, hidden: np.ndarray, attention_mask: np.ndarray) -> KernelResult:
    b, t = ctx.batch, ctx.seq
    if ctx.packing is not None:  # (N, C) real tokens → (B, C)
        return ctx.packing.mean(hidden), 2 * hidden.size
    return ops.mean_pool(hidden.reshape(b, t, -1), attention_mask), 2 * hidden.size


def k_l2_normalize(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
    return ops.l2_normalize(x), 3 * x.size


def k_conv(node: Node, ctx: RunContext, x: np.ndarray, *residual: np.ndarray) -> KernelResult:
    """SAME conv (GEMM, im2col first when k > 1) + bias, residual, activation in its output."""
    lin, k, s = node.linear, node.attrs["kernel"], node.attrs["stride"]
    out = ctx.buffers.take(conv.output_shape(x.shape, k, s, lin.out_features))
    y = conv.conv2d(x, lin, k, s, ctx.splitter, node.attrs.get("activation"), residual[0] if residual else None, out)
    return y, int(lin.flops(y.size // lin.out_features)) + y.size * (2 if residual else 1)


def k_depthwise_conv(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
    w, s = node.params["weight"], node.attrs["stride"]  # (KH, KW, C)
    out = ctx.buffers.take(conv.output_shape(x.shape, w.shape[0], s, x.shape[3]))
    y = conv.depthwise_conv(x, w, node.params.get("bias"), s, ctx.splitter, node.attrs.get("activation"), out)
    return y, 2 * y.size * w.shape[0] * w.shape[1] + y.size


def k_mbconv(node: Node, ctx: RunContext, x: np.ndarray, *residual: np.ndarray) -> KernelResult:
    """A whole inverted-residual block (fusion.fuse_mbconv), tile by tile through L2."""
    *expand, dw, project = node.attrs["parts"]
    w, s = dw.params["weight"], node.attrs["stride"]  # (KH, KW, hidden)
    out = ctx.buffers.take(conv.output_shape(x.shape, w.shape[0], s, project.linear.out_features))
    block = mbconv_plan.Block(expand[0].linear if expand else None, w, dw.params["bias"], s, project.linear)
    y = mbconv_plan.mbconv(x, block, ctx.splitter, residual[0] if residual else None, out)
    hidden = y.size // project.linear.out_features * w.shape[2]  # depthwise outputs
    flops = project.linear.flops(y.size // project.linear.out_features) + y.size * (2 if residual else 1)
    flops += 2 * hidden * w.shape[0] * w.shape[1] + hidden
    if expand:
        flops += expand[0].linear.flops(x.size // x.shape[3]) + (x.size // x.shape[3]) * w.shape[2]
    return y, flops


def k_batchnorm(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
    return conv.batchnorm(x, node.params["scale"], node.params["shift"]), 2 * x.size


def k_relu6(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
    return conv.relu6(x), x.size


def k_global_avg_pool(node: Node, ctx: RunContext, x: np.ndarray) -> KernelResult:
    return conv.global_avg_pool(x), x.size


KERNELS: dict[str, Kernel] = {
    "Embeddings": k_embeddings,
    "LayerNorm": k_layernorm,
    "AttentionMask": k_attention_mask,
    "Linear": k_linear,
    "LinearAddLayerNorm": k_linear_add_layernorm,
    "Add": k_add,
    "Gelu": _unary(ops.gelu_, "Gelu"),
    "Relu": _unary(ops.relu_, "Relu"),
    "Softmax": _unary(ops.softmax_, "Softmax"),
    "Attention": k_attention,
    "MeanPool": k_mean_pool,
    "L2Normalize": k_l2_normalize,
    "Conv": k_conv,
    "DepthwiseConv": k_depthwise_conv,
    "MBConv": k_mbconv,
    "BatchNorm": k_batchnorm,
    "Relu6": k_relu6,
    "GlobalAvgPool": k_global_avg_pool,
}


class Executor:
    """Runs a graph; reusable across calls (holds the thread pool)."""

    def __init__(self, graph: Graph, threads: int | None = None):
        unknown = sorted({n.op for n in graph.nodes} - KERNELS.keys())
        if unknown:
            raise ValueError(f"graph has ops with no kernel: {unknown}")
        self.graph = graph
        self.splitter = RowSplitter(threads)
        self.buffers = BufferPool()  # conv outputs, reused across nodes and calls
        # value → index of the last node reading it; freed after that node (bounded memory). The
        # feeds are the caller's (never the pool's): nothing to give back, so not listed.
        last_use: dict[str, int] = {}
        for i, n in enumerate(graph.nodes):
            for v in n.inputs:
                last_use[v] = i
        keep = set(graph.outputs) | set(graph.inputs)
        self.free_after = [
            [v for v in set(n.inputs) if last_use[v] == i and v not in keep] for i, n in enumerate(graph.nodes)
        ]
        self.groups = layer_groups(graph)  # start node of each step of a resumable pass

    def run(self, feeds: dict[str, np.ndarray], profiler: OpProfiler | None = None) -> dict[str, np.ndarray]:
        run = self.start(feeds, profiler)
        try:
            while not run.step():
                pass
            return run.result()
        finally:
            run.close()

    def start(self, feeds: dict[str, np.ndarray], profiler: OpProfiler | None = None) -> Resumable:
        """A pass over ``feeds`` that runs one layer group per ``step()`` (``run`` is start, step
        until done, result): between steps it holds only the values still to be read (the
        hidden states, the mask bias, the packing), so the caller may run other passes on this
        executor in between and resume it later, on the same thread or another one in turn."""
        first = feeds[self.graph.inputs[0]]
        layout = self.graph.meta.get("input_layout", ("batch", "seq"))  # e.g. (batch, height, width, channels)
        if first.ndim != len(layout):
            raise ValueError(
                f"{self.graph.inputs[0]} must be {len(layout)}-D ({', '.join(layout)}), got shape {first.shape}"
            )
        ctx = RunContext(batch=first.shape[0], seq=first.shape[1], splitter=self.splitter, buffers=self.buffers)
        # Text graphs (meta "token_outputs": the outputs that are per-token rows) run padding-free
        # when the batch holds enough padding to pay for it (engine.graph.packing).
        token_outputs = self.graph.meta.get("token_outputs")
        if token_outputs is not None and "attention_mask" in feeds:
            ctx.packing = TokenPacking.from_mask(feeds["attention_mask"])
        return Resumable(self, dict(feeds), ctx, profiler)

    def close(self) -> None:
        self.splitter.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # the thread pool is released however the block ends


_LAYER_NAME = re.compile(r"^([A-Za-z_]+\.\d+)\.")  # "layer.3.ffn.up" → "layer.3"; "blocks.4.mbconv" → "blocks.4"


def layer_groups(graph: Graph) -> list[int]:
    """Start index of each layer group: a run of nodes of one numbered layer (``layer.3.*``,
    ``blocks.4.*``); nodes outside any layer (embeddings, stem, pooling, head) join the group
    they follow, or the first layer's when they come first. A graph without numbered layers is
    one group."""
    starts = [0]
    current: str | None = None
    for i, node in enumerate(graph.nodes):
        m = _LAYER_NAME.match(node.name)
        if m is None:
            continue
        if current is not None and m.group(1) != current:
            starts.append(i)
        current = m.group(1)
    return starts


class Resumable:
    """One pass of an ``Executor`` in steps of one layer group (``Executor.start``).

    State between steps: the values still to be read (for BERT the (N, C) hidden states and the
    attention-mask bias; for the CNN the block's (B, H, W, C) output) and the ``RunContext``
    (packing). ``step()`` runs the next group and says whether the pass is done; ``result()``
    gives the outputs; ``close()`` lets go of the state (a pass dropped half-way: its arrays
    are freed, its pool buffers are not lent any more). BLAS threads are set per step, as
    ``run`` set them per call: the pass may be resumed after another one changed them.
    The trade-off: a step ends only at a group boundary, so a long batch yields once per layer
    (~1/L of its time), never inside a GEMM.
    """

    def __init__(self, executor: Executor, env: dict[str, Any], ctx: RunContext, profiler: OpProfiler | None):
        self._executor = executor
        self._env: dict[str, Any] | None = env  # arrays; the attention-mask bias may be None
        self._ctx = ctx
        self._profiler = profiler
        self._starts = executor.groups
        self._group = 0
        self._outputs: dict[str, np.ndarray] | None = None

    @property
    def steps(self) -> int:
        """Layer groups in the pass."""
        return len(self._starts)

    def step(self) -> bool:
        """Run the next layer group; True when the pass is complete (then ``result()``)."""
        if self._outputs is not None:
            return True
        env = self._env
        if env is None:
            raise RuntimeError("the pass was closed")
        ex = self._executor
        graph = ex.graph
        lo = self._starts[self._group]
        hi = self._starts[self._group + 1] if self._group + 1 < len(self._starts) else len(graph.nodes)
        # A graph whose ops do their own threading (the CNN: row-blocked convs) keeps BLAS on one
        # thread for the whole pass: waking OpenBLAS's idle pool costs more than a small GEMM on
        # the loaded 2-core VM (measured: 28 conv blocks of 112x40 @ 40x240 took 468 ms with
        # the pool, 0.8 ms without; the 1280x1000 classifier at batch 8, 22 ms vs 1 ms).
        blas_threads = graph.meta.get("blas_threads")
        previous = blas().set_threads_local(blas_threads) if blas_threads else 0
        try:
            self._run_nodes(env, lo, hi)
        except BaseException:
            self.close()
            ex.buffers.forget_lent()  # what the failed kernel took is not coming back
            raise
        finally:
            if previous:
                blas().set_threads_local(previous)
        self._group += 1
        if self._group < len(self._starts):
            return False
        ctx = self._ctx
        if ctx.packing is not None:  # per-token outputs back to the caller's (B*T, C) rows, padding zero
            for name in graph.meta["token_outputs"]:
                env[name] = ctx.packing.unpack(env[name])
        self._outputs = {name: env[name] for name in graph.outputs}
        self._env = None
        ex.buffers.forget_lent()  # what is still out (the outputs) now belongs to the caller
        return True

    def _run_nodes(self, env: dict[str, Any], lo: int, hi: int) -> None:
        ex, ctx, profiler = self._executor, self._ctx, self._profiler
        release = ex.buffers.release
        for node, free in zip(ex.graph.nodes[lo:hi], ex.free_after[lo:hi], strict=True):
            kernel = KERNELS[node.op]
            if profiler is None:
                result = kernel(node, ctx, *[env[v] for v in node.inputs])[0]
            else:
                args = [env[v] for v in node.inputs]
                t0 = time.perf_counter()
                result, flops = kernel(node, ctx, *args)
                profiler.record(node, time.perf_counter() - t0, flops)
            env[node.outputs[0]] = result
            for v in free:
                release(env.pop(v, None))

    def result(self) -> dict[str, np.ndarray]:
        if self._outputs is None:
            raise RuntimeError("the pass is not complete: step() until it returns True")
        return self._outputs

    def close(self) -> None:
        """Drop the pass's state; pool buffers it holds go back to the executor's pool."""
        env, self._env = self._env, None
        if env is not None:
            for value in env.values():
                self._executor.buffers.release(value)
