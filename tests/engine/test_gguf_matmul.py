"""Packed quantized matmuls (Q4_1, Q8_0) vs the naive dequantize-then-multiply reference, and the
whole decoder on quantized weights vs float32 weights (the error figure docs/decoder.md states)."""

from __future__ import annotations

import numpy as np
import pytest

from openhood.engine.kernels.gguf_matmul import QuantMatrix, quant_linear_naive
from openhood.engine.kernels.packed_matmul import CH, PackedMatrix, packed_linear
from openhood.formats.gguf import GGUFFile, dequantize


@pytest.fixture(scope="module")
def gguf_file(smollm2_path):
    return GGUFFile(smollm2_path)


@pytest.mark.parametrize("name", ["blk.0.ffn_gate.weight", "blk.5.ffn_down.weight", "token_embd.weight"])
# gemv (1); packed gemm: remainder rows only (3), full passes (16), both (31); BLAS sgemm on the
# dequantized matrix from BLAS_ROWS on (32, 70; the 49k-row embedding stays on the packed gemm)
@pytest.mark.parametrize("rows", [1, 3, 16, 31, 32, 70])
def test_packed_matmul_equals_dequantized_reference(gguf_file, name, rows):
    t = gguf_file.tensors[name]
    x = np.random.default_rng(rows).standard_normal((rows, t.shape[1]), dtype=np.float32)
    got = packed_linear(x, PackedMatrix.from_quant(QuantMatrix.from_tensor(t)))
    ref = quant_linear_naive(x, t)
    assert got.shape == (rows, t.shape[0])
    assert np.abs(got - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("rows", [1, 5, 40])
def test_packed_matmul_pads_a_ragged_last_chunk(gguf_file, kind, rows):
    name = "blk.0.ffn_gate.weight" if kind == "Q4_1" else "token_embd.weight"
    full = QuantMatrix.from_tensor(gguf_file.tensors[name])
    n = CH + 7  # one full chunk and a chunk of 7 real rows + 57 zero rows
    qm = QuantMatrix(kind, (n, full.shape[1]), full.d[:n], None if full.m is None else full.m[:n], full.q[:n])
    pm = PackedMatrix.from_quant(qm)
    assert pm.d.shape[0] == 2
    x = np.random.default_rng(0).standard_normal((rows, qm.shape[1]), dtype=np.float32)
    ref = x.astype(np.float64) @ qm.dequantize().astype(np.float64).T
    got = packed_linear(x, pm)
    assert got.shape == (rows, n)
    assert np.abs(got - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    np.testing.assert_array_equal(pm.rows(np.array([0, n - 1, CH])), qm.rows(np.array([0, n - 1, CH])))


def test_quantized_rows_and_permutation(gguf_file):
    t = gguf_file.tensors["token_embd.weight"]
    w = QuantMatrix.from_tensor(t)
    idx = np.array([0, 5, 49151])
    np.testing.assert_array_equal(w.rows(idx), dequantize(t)[idx])
    np.testing.assert_array_equal(PackedMatrix.from_quant(w).rows(idx), dequantize(t)[idx])
    q = QuantMatrix.from_tensor(gguf_file.tensors["blk.0.attn_k.weight"])
    order = np.arange(q.shape[0])[::-1]
    np.testing.assert_array_equal(q.permute_rows(order).rows(np.arange(3)), q.rows(order[:3]))


def test_quantized_decoder_matches_float32_decoder(smollm2, smollm2_path):
    from openhood.engine.models.llama import Llama

    q = Llama.from_gguf(smollm2_path, weights="quantized")
    assert q.weight_bytes < smollm2.weight_bytes / 4
    ids = np.array([1, 4093, 198, 19556, 905, 17, 216, 33, 34])
    diff = np.abs(q.forward_full(ids) - smollm2.forward_full(ids)).max()
    assert diff <= 1e-3  # same weights, other summation order: measured ~1e-4
    cache = q.new_cache(1, 16)
    np.testing.assert_allclose(q.forward([ids], [0], cache)[0], smollm2.forward_full(ids)[-1], atol=1e-3)
    with pytest.raises(ValueError, match="weights must be"):
        Llama.from_gguf(smollm2_path, weights="int3")


def test_widening_float16_factors_is_exact_for_every_finite_value():
    """The kernels keep block factors as float16 bits and widen them per chunk: every finite
    float16 (subnormals and -0 included) must come out as NumPy's float32 of it, bit for bit."""
    from openhood.engine.kernels.packed_matmul import _widen_f16

    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    finite = every[np.isfinite(every.view(np.float16))][: 63488 // CH * CH].reshape(-1, CH)  # (rows, CH)
    out = np.empty(finite.shape, np.float32)
    _widen_f16(finite, out, np.empty(finite.size, np.uint32))
    np.testing.assert_array_equal(out.view(np.uint32), finite.view(np.float16).astype(np.float32).view(np.uint32))


def test_packed_factors_are_the_files_float16_bits(smollm2_path):
    """The packed layout carries each block's scale and min exactly as the file stores them."""
    g = GGUFFile(smollm2_path)
    t = g.tensors["blk.0.attn_output.weight"]
    assert t.kind == "Q4_1"
    rows, cols = t.shape
    pm = PackedMatrix.from_quant(QuantMatrix.from_tensor(t))
    blocks = np.asarray(t.raw).reshape(rows, cols // 32, 20)  # (rows, nb, 20): f16 d, f16 m, nibbles
    d_file = blocks[..., 0:2].copy().view(np.uint16)[..., 0]  # (rows, nb)
    m_file = blocks[..., 2:4].copy().view(np.uint16)[..., 0]
    d_packed = np.moveaxis(pm.d, -1, 1).reshape(-1, cols // 32)[:rows]  # (nc, nb, CH) -> rows
    m_packed = np.moveaxis(pm.m, -1, 1).reshape(-1, cols // 32)[:rows]
    assert pm.d.dtype == np.uint16
    np.testing.assert_array_equal(d_packed, d_file)
    np.testing.assert_array_equal(m_packed, m_file)
