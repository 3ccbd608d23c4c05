"""openhood.engine.kernels: the ground floor, numeric kernels and what runs them.

Compiled kernels, each beside the naive reference the tests hold it to: ``rows`` (row kernels
of the elementwise epilogues, numba source ``numba_rows``, compiled ahead of time) under ``ops`` (the encoder's ops: GELU, LayerNorm,
softmax, pooling, attention), ``panel_gemm`` (packed-panel GEMM, LLVM IR), ``pointwise_simd``
and ``depthwise_simd`` (the CNN's 1×1 and k×k convolutions), ``conv_kernels`` (numba im2col and
border pixels), ``gguf_matmul`` and ``packed_matmul`` (GGUF Q4_1 / Q8_0 blocks). ``linear`` is
the one dense-layer contract every product implements (int8 and fp16 replace it by node name).
The machinery: ``llvm_jit`` (IR → this CPU's code), ``call_list`` (many native calls in one),
``blas`` (OpenBLAS threads per calling thread), ``parallel`` (row splits over threads),
``cores`` (the cores this process may really use).

The trade-off: this floor imports nothing above it, so a kernel knows no graph and no model;
what an op graph needs is built one floor up from these parts.
"""
