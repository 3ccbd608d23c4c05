"""The panel-packed GEMM (``engine.kernels.panel_gemm``) against its naive float64 reference and BLAS.

Every tile height (1–6 rows and the chunk boundary at 96 rows), odd and tiny K, several panel
counts, each epilogue (product only, + bias, + bias ReLU, + bias softmax) and the lane-masked
store of a partial last panel; then ``PanelLinear`` inside the MLP graph: one fused kernel call
per node, the same probabilities as the all-BLAS graph (``packed=False``), the fused nodes
still timed by the op profiler, and the BLAS fallback when BLAS is multi-threaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from openhood.backends import prepare_graph
from openhood.engine.graph.runtime import Executor
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.ops import softmax_naive
from openhood.engine.kernels.panel_gemm import (
    ROWS_PER_CHUNK,
    PanelLinear,
    gemm_kernel,
    pack_panels,
    panel_linear,
    panel_linear_reference,
    panel_matmul,
    panel_matmul_reference,
)
from openhood.engine.models.mlp import INPUT_NAME, build_mlp

needs_kernel = pytest.mark.skipif(gemm_kernel() is None, reason="no AVX2/FMA or no JIT: BLAS serves instead")


def test_pack_panels_layout():
    w = np.arange(3 * 20, dtype=np.float32).reshape(3, 20)
    p = pack_panels(w)  # (2, 3, 16)
    assert p.shape == (2, 3, 16)
    assert (p[0, 1] == w[1, :16]).all() and (p[1, 2, :4] == w[2, 16:]).all() and (p[1, :, 4:] == 0).all()
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(panel_matmul_reference(x, p, 20), x @ w)


@needs_kernel
@pytest.mark.parametrize("m", [1, 2, 5, 6, 7, 13, 64, ROWS_PER_CHUNK, ROWS_PER_CHUNK + 5, 250])
@pytest.mark.parametrize(("k", "n"), [(1, 16), (3, 32), (64, 256), (784, 48), (256, 10), (5, 1), (7, 33)])
def test_kernel_equals_the_reference(m, k, n):
    rng = np.random.default_rng(m * 1000 + k)
    x = rng.standard_normal((m, k), dtype=np.float32)
    panels = pack_panels(rng.standard_normal((k, n), dtype=np.float32))
    got = panel_matmul(x, panels, n)
    want = panel_matmul_reference(x, panels, n)
    scale = np.abs(x).astype(np.float64) @ np.abs(panel_matmul_reference(np.eye(k, dtype=np.float32), panels, n))
    assert np.all(np.abs(got - want) <= 1e-6 * scale + 1e-30)  # float32 accumulation, k ascending


@needs_kernel
@pytest.mark.parametrize("m", [1, 2, 5, 6, 7, 13, 64, ROWS_PER_CHUNK + 5])
@pytest.mark.parametrize(
    ("k", "n", "activation"),
    [
        (k, n, act)
        for k, n in [(1, 16), (64, 256), (784, 48), (256, 10), (5, 1), (7, 33), (9, 16)]
        for act in (None, "relu", "softmax")
        if act != "softmax" or n <= 16  # the softmax epilogue needs the row in one panel
    ],
)
def test_fused_epilogue_equals_the_reference(m, k, n, activation):
    rng = np.random.default_rng(m * 1000 + k + n)
    x = rng.standard_normal((m, k), dtype=np.float32)
    panels = pack_panels(rng.standard_normal((k, n), dtype=np.float32))
    bias = rng.standard_normal(n, dtype=np.float32)
    flat = np.full(m * n + 37, 7.0, np.float32)  # the output, then a sentinel tail
    got = panel_linear(x, panels, n, bias, activation, out=flat[: m * n].reshape(m, n))
    assert (flat[m * n :] == 7.0).all()  # the masked store wrote no column past n
    want = panel_linear_reference(x, panels, n, bias, activation)
    if activation == "softmax":  # probabilities: absolute error, rows sum to 1
        # the epilogue alone, on the kernel's own logits; then end to end (logits of ~±50 carry
        # their float32 rounding into the probabilities)
        exact = softmax_naive(panel_linear(x, panels, n, bias, None))
        assert np.max(np.abs(got - exact)) < 1e-6 and np.allclose(got.sum(axis=1), 1.0, atol=1e-6)
        assert np.max(np.abs(got - want)) < 1e-5
        return
    scale = np.abs(x).astype(np.float64) @ np.abs(panel_matmul_reference(np.eye(k, dtype=np.float32), panels, n))
    assert np.all(np.abs(got - want) <= 1e-6 * (scale + np.abs(bias)) + 1e-30)
    if activation == "relu":
        assert (got >= 0).all()


@needs_kernel
def test_softmax_epilogue_edge_rows():
    """A dominant logit, equal logits and a row whose other classes underflow exp to exactly 0."""
    w = np.eye(3, 10, dtype=np.float32)  # (3, 10): logits = x in the first 3 columns, 0 elsewhere
    x = np.array([[200.0, 0, 0], [0, 0, 0], [-200.0, 50.0, 0], [1.0, 2.0, 3.0]], np.float32)
    got = panel_linear(x, pack_panels(w), 10, None, "softmax")
    want = panel_linear_reference(x, pack_panels(w), 10, None, "softmax")
    assert np.max(np.abs(got - want)) < 1e-6
    assert got[0, 0] == 1.0 and (got[0, 1:] == 0.0).all()
    np.testing.assert_allclose(got[1], np.full(10, 0.1, np.float32), rtol=1e-6)


@needs_kernel
def test_kernel_checks_its_arguments():
    panels = pack_panels(np.ones((4, 16), np.float32))
    with pytest.raises(ValueError, match="take"):
        panel_matmul(np.ones((2, 5), np.float32), panels, 16)
    with pytest.raises(ValueError, match=r"hold 1\.\.16 columns"):
        panel_matmul(np.ones((2, 4), np.float32), panels, 17)
    with pytest.raises(ValueError, match="out must be"):
        panel_matmul(np.ones((2, 4), np.float32), panels, 16, out=np.empty((2, 17), np.float32))
    assert panel_matmul(np.ones((0, 4), np.float32), panels, 16).shape == (0, 16)
    with pytest.raises(ValueError, match="softmax epilogue"):
        panel_linear(np.ones((2, 4), np.float32), pack_panels(np.ones((4, 17), np.float32)), 17, None, "softmax")
    out = np.empty((3, 16), np.float32)
    assert panel_matmul(np.ones((3, 4)), panels, 16, out=out) is out  # float64 input converted
    assert (out == 4).all()


def test_panel_linear_is_a_linear_and_falls_back_to_blas():
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((40, 26), dtype=np.float32), rng.standard_normal(26, dtype=np.float32)
    lin, plain = PanelLinear(w, b), Linear(w, b)
    assert isinstance(lin, Linear) and lin.nbytes() > plain.nbytes() and lin.flops(9) == plain.flops(9)
    x = rng.standard_normal((9, 40), dtype=np.float32)
    with threadpool_limits(limits=2):
        np.testing.assert_array_equal(lin.forward(x), plain.forward(x))  # multi-threaded BLAS: np.matmul
        assert lin.fused_forward(x, "relu") is None  # … and the executor's generic path
    np.testing.assert_array_equal(lin.forward(x[:1]), plain.forward(x[:1]))  # one row: np.matmul
    with threadpool_limits(limits=1):
        np.testing.assert_allclose(lin.forward(x), plain.forward(x), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_fused_forward_takes_only_its_own_calls():
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((40, 26), dtype=np.float32), rng.standard_normal(26, dtype=np.float32)
    lin, x = PanelLinear(w, b), rng.standard_normal((9, 40), dtype=np.float32)
    with threadpool_limits(limits=1):
        for rows in (1, 9):  # one row too: one call beats GEMV + a row kernel
            got = lin.fused_forward(x[:rows], "relu")
            np.testing.assert_allclose(got, np.maximum(x[:rows] @ w + b, 0), rtol=1e-5, atol=1e-5)
        assert lin.fused_forward(x.astype(np.float64), "relu") is None  # the generic path converts
        assert lin.fused_forward(np.asfortranarray(x), "relu") is None
        assert lin.fused_forward(x[:, :39], "relu") is None
        assert lin.fused_forward(x, "softmax") is None  # 26 columns: two panels, no row-wide softmax
        assert lin.fused_forward(x, "gelu") is None  # no GELU epilogue: matmul + the row kernel
        x.flags.writeable = False  # read-only input: the pointer comes from .ctypes
        np.testing.assert_allclose(lin.fused_forward(x, None), x @ w + b, rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("batch", [1, 7, 64, 130])
def test_packed_mlp_graph_equals_the_blas_graph(batch):
    x = np.random.default_rng(batch).uniform(0, 1, (batch, 784)).astype(np.float32)
    packed, plain = prepare_graph(build_mlp()), prepare_graph(build_mlp(packed=False))
    assert [type(n.linear).__name__ for n in packed.nodes if n.linear] == ["PanelLinear", "PanelLinear"]
    assert all(type(n.linear) is Linear for n in plain.nodes if n.linear)
    with threadpool_limits(limits=1), Executor(packed, threads=1) as a, Executor(plain, threads=1) as b:
        got, want = a.run({INPUT_NAME: x})["probs"], b.run({INPUT_NAME: x})["probs"]
    assert np.max(np.abs(got - want)) < 1e-6


class Recorder:
    def __init__(self):
        self.calls = []

    def record(self, node, seconds, flops):
        self.calls.append((node.label, flops))


@needs_kernel
def test_fused_nodes_are_one_kernel_call_each_and_stay_visible_to_the_profiler(monkeypatch):
    x = np.random.default_rng(3).uniform(0, 1, (64, 784)).astype(np.float32)
    packed, plain = prepare_graph(build_mlp()), prepare_graph(build_mlp(packed=False))
    seen = {}
    for name, graph in (("packed", packed), ("plain", plain)):
        with threadpool_limits(limits=1), Executor(graph, threads=1) as ex:
            if name == "packed":  # the fused path never falls back to matmul + row kernels

                def refuse(*args, **kwargs):
                    raise AssertionError("the fused node took the generic path")

                monkeypatch.setattr(PanelLinear, "matmul", refuse)
            rec = Recorder()
            seen[name] = (ex.run({INPUT_NAME: x}, profiler=rec)["probs"], rec.calls)
            monkeypatch.undo()
    assert seen["packed"][1] == seen["plain"][1]  # same labels, same arithmetic counted
    assert [label for label, _ in seen["packed"][1]] == ["Linear+Relu", "Linear+Softmax"]
    assert np.max(np.abs(seen["packed"][0] - seen["plain"][0])) < 1e-6
