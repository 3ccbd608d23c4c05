"""``Linear``: the one swappable matrix-product layer of the engine.

Every dense layer in a graph is a ``Linear`` object held by a node, never inlined into a
kernel, so another precision (int8, fp16) replaces it by node name (``Graph.replace_linear``)
and every fused epilogue (GELU, residual + LayerNorm, …) keeps working. The contract a
replacement implements:

- ``in_features``, ``out_features``, ``bias`` ((out,) float32 or None)
- ``matmul(x (M, in) float32, out=None) -> (M, out) float32``: the product WITHOUT bias
  (fused kernels add the bias in their own cache-resident epilogue)
- ``forward(x, out=None)``: matmul + bias
- ``flops(m)``: arithmetic of one call on M rows, for the profiler; ``nbytes()``: stored size

ONNX export of each kind lives in ``openhood.export.linear`` (export depends on the engine,
never the reverse).

The trade-off: weights are stored (in, out) so ``x @ W`` is a plain row-major GEMM with no
transpose at run time; loading transposes the (out, in) PyTorch layout once.
"""

from __future__ import annotations

import numpy as np


class Linear:
    """y = x @ weight + bias, float32; weight (in, out) C-contiguous.

    >>> lin = Linear(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0.5, 0.5]))
    >>> lin.forward(np.array([[1.0, 1.0]], np.float32)).tolist(), lin.flops(4)
    ([[1.5, 2.5]], 32)
    """

    precision = "fp32"

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None):
        weight = np.ascontiguousarray(weight, dtype=np.float32)
        if weight.ndim != 2:
            raise ValueError(f"Linear weight must be 2-D (in, out), got shape {weight.shape}")
        if bias is not None:
            bias = np.ascontiguousarray(bias, dtype=np.float32)
            if bias.shape != (weight.shape[1],):
                raise ValueError(f"Linear bias shape {bias.shape} does not match out_features {weight.shape[1]}")
        self.weight = weight
        self.bias = bias

    @classmethod
    def from_torch_layout(cls, weight_out_in: np.ndarray, bias: np.ndarray | None) -> Linear:
        """PyTorch/safetensors store (out, in); transpose once at load."""
        return cls(np.asarray(weight_out_in).T, bias)

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[1])

    def matmul(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        # (M, in) @ (in, out) -> (M, out): one sgemm, threaded by BLAS.
        return np.matmul(x, self.weight, out=out)

    def forward(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        y = self.matmul(x, out=out)
        if self.bias is not None:
            y += self.bias
        return y

    def flops(self, m: int) -> int:
        return 2 * m * self.in_features * self.out_features

    def nbytes(self) -> int:
        return self.weight.nbytes + (0 if self.bias is None else self.bias.nbytes)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_features}->{self.out_features}, {self.precision})"
