"""A Llama decoder's weights as held: one layer's (``LayerWeights``) and every layer's stacked by
role (``LayerStacks``, what the one-call decode step of ``llama_step`` reads).

Kept apart from ``llama`` (the forward pass) and ``llama_step`` (the compiled step, numba's) so
that both read the same containers without importing each other, and building a model imports no
numba. The trade-off: stacking copies each role's blocks into one array at load (a transient second
copy of the quantized weights); the layers then hold views into the stacks, so nothing stays twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from openhood.engine.kernels.packed_layout import PackedMatrix, PackedStack

Matrix = np.ndarray | PackedMatrix  # a weight as held: float32 array or packed quantized blocks
STACKED_ROLES = ("wqkv", "wo", "w_gate_up", "w_down")  # LayerWeights' matrices, stacked for the one-call step


@dataclass
class LayerWeights:
    """Matrices are float32 arrays or ``PackedMatrix`` (same (out, in) shape either way)."""

    attn_norm: np.ndarray  # (D,)
    wqkv: Matrix  # (D + 2 * kv_dim, D): Q, K, V rows stacked, Q/K in HF (half-split) layout
    wo: Matrix  # (D, D)
    ffn_norm: np.ndarray  # (D,)
    w_gate_up: Matrix  # (2 * F, D): gate rows then up rows
    w_down: Matrix  # (D, F)


@dataclass(frozen=True)
class LayerStacks:
    """Every layer's weights by role: the four Q4_1 matrices stacked, the norms (L, D)."""

    wqkv: PackedStack
    wo: PackedStack
    w_gate_up: PackedStack
    w_down: PackedStack
    attn_norm: np.ndarray  # (L, D) float32
    ffn_norm: np.ndarray  # (L, D) float32

    @property
    def nbytes(self) -> int:
        """What a decode step over every layer reads."""
        mats = (self.wqkv, self.wo, self.w_gate_up, self.w_down)
        return sum(s.nbytes for s in mats) + self.attn_norm.nbytes + self.ffn_norm.nbytes


def stack_layers(layers: list[LayerWeights]) -> tuple[LayerStacks | None, list[LayerWeights]]:
    """The layers' stacks and the layers rebuilt as views into them, when every layer's four
    matrices are Q4_1 blocks of one shape per role; else (None, the layers unchanged)."""
    stacks = {role: PackedStack.of([getattr(L, role) for L in layers]) for role in STACKED_ROLES}
    if any(st is None for st in stacks.values()):
        return None, layers
    norms = {
        n: np.ascontiguousarray(np.stack([getattr(L, n) for L in layers]), dtype=np.float32)
        for n in ("attn_norm", "ffn_norm")
    }
    st = LayerStacks(**stacks, **norms)  # type: ignore[arg-type]
    views = [
        dataclasses.replace(L, **{role: getattr(st, role).matrix(i) for role in STACKED_ROLES})
        for i, L in enumerate(layers)
    ]
    return st, views
