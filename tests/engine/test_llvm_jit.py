"""engine/llvm_jit: the one place that turns LLVM IR text into callable machine code."""

from __future__ import annotations

import ctypes

import pytest

from openhood.engine.kernels.llvm_jit import host_has_simd, jit_module

FMA_IR = """
declare <8 x float> @llvm.fma.v8f32(<8 x float>, <8 x float>, <8 x float>)

define void @axpy8(ptr %x, ptr %y, float %a) {
entry:
  %av = insertelement <8 x float> poison, float %a, i64 0
  %as = shufflevector <8 x float> %av, <8 x float> poison, <8 x i32> zeroinitializer
  %xv = load <8 x float>, ptr %x, align 4
  %yv = load <8 x float>, ptr %y, align 4
  %r = call <8 x float> @llvm.fma.v8f32(<8 x float> %as, <8 x float> %xv, <8 x float> %yv)
  store <8 x float> %r, ptr %y, align 4
  ret void
}
"""


@pytest.mark.skipif(not host_has_simd(), reason="the kernels need AVX2 + FMA")
def test_compiled_function_runs_and_matches_numpy():
    import numpy as np

    address = jit_module(FMA_IR)
    assert address is not None
    axpy8 = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float)(address("axpy8"))
    x = np.arange(8, dtype=np.float32)
    y = np.full(8, 0.5, dtype=np.float32)
    expected = 2.5 * x + y
    axpy8(x.ctypes.data, y.ctypes.data, 2.5)
    np.testing.assert_array_equal(y, expected)


def test_invalid_ir_raises_instead_of_returning_a_bad_pointer():
    if not host_has_simd():
        assert jit_module("this is not IR") is None
        return
    with pytest.raises(RuntimeError):
        jit_module("define void @f( {")
