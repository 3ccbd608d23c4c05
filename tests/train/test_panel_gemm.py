"""The panel-packed GEMM (``engine.panel_gemm``) against its naive float64 reference and BLAS.

Every tile height (1–6 rows and the chunk boundary at 96 rows), odd and tiny K, several panel
counts; then ``PanelLinear`` inside the MLP graph: the same probabilities as the all-BLAS graph
(``packed=False``), and the BLAS fallback when BLAS is multi-threaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from openhood.backends import prepare_graph
from openhood.engine.linear import Linear
from openhood.engine.mlp import INPUT_NAME, build_mlp
from openhood.engine.panel_gemm import (
    ROWS_PER_CHUNK,
    PanelLinear,
    gemm_kernel,
    pack_panels,
    panel_matmul,
    panel_matmul_reference,
)
from openhood.engine.runtime import Executor

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
def test_kernel_checks_its_arguments():
    panels = pack_panels(np.ones((4, 16), np.float32))
    with pytest.raises(ValueError, match="take"):
        panel_matmul(np.ones((2, 5), np.float32), panels, 16)
    with pytest.raises(ValueError, match=r"hold 1\.\.16 columns"):
        panel_matmul(np.ones((2, 4), np.float32), panels, 17)
    with pytest.raises(ValueError, match="out must be"):
        panel_matmul(np.ones((2, 4), np.float32), panels, 16, out=np.empty((2, 17), np.float32))
    assert panel_matmul(np.ones((0, 4), np.float32), panels, 16).shape == (0, 16)
    out = np.empty((3, 16), np.float32)
    assert panel_matmul(np.ones((3, 4)), panels, 16, out=out) is out  # float64 input converted
    assert (out == 4).all()


def test_panel_linear_is_a_linear_and_falls_back_to_blas():
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((40, 26), dtype=np.float32), rng.standard_normal(26, dtype=np.float32)
    lin, plain = PanelLinear(w, b), Linear(w, b)
    assert isinstance(lin, Linear) and lin.nbytes() > plain.nbytes()
    assert not PanelLinear.suits(np.zeros((40, 10), np.float32))  # a 10-class head stays BLAS
    x = rng.standard_normal((9, 40), dtype=np.float32)
    with threadpool_limits(limits=2):
        np.testing.assert_array_equal(lin.forward(x), plain.forward(x))  # multi-threaded BLAS: np.matmul
    np.testing.assert_array_equal(lin.forward(x[:1]), plain.forward(x[:1]))  # one row: np.matmul
    with threadpool_limits(limits=1):
        np.testing.assert_allclose(lin.forward(x), plain.forward(x), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("batch", [1, 7, 64, 130])
def test_packed_mlp_graph_equals_the_blas_graph(batch):
    x = np.random.default_rng(batch).uniform(0, 1, (batch, 784)).astype(np.float32)
    packed, plain = prepare_graph(build_mlp()), prepare_graph(build_mlp(packed=False))
    assert [type(n.linear).__name__ for n in packed.nodes if n.linear] == ["PanelLinear", "Linear"]
    assert all(type(n.linear) is Linear for n in plain.nodes if n.linear)
    with threadpool_limits(limits=1), Executor(packed, threads=1) as a, Executor(plain, threads=1) as b:
        got, want = a.run({INPUT_NAME: x})["probs"], b.run({INPUT_NAME: x})["probs"]
    assert np.max(np.abs(got - want)) < 1e-6
