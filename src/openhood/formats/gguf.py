"""Read a GGUF file (llama.cpp's format): metadata, tensors, and Q4_1 / Q8_0 dequantization.

Parsing the container is taken, not built: the maintained ``gguf`` package memory-maps the
file, so opening a 100 MB model costs no copy and each tensor is a view of the page cache
until something dequantizes it. What we own is what the numbers mean: the block layouts of
the two quantized types SmolLM2's file uses, each with a naive per-block reference beside the
vectorized version, and the Q/K row permutation that llama-family conversion applies.

Shapes: GGUF lists dimensions innermost first (``[576, 49152]`` for the embedding); here a
tensor's ``shape`` is NumPy order ``(rows, cols)`` = ``(out_features, in_features)``, the same
as a PyTorch ``nn.Linear`` weight, and quantization blocks run along ``cols``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from openhood.formats.errors import ModelFileError

# Block layouts (ggml-common.h). Each block covers 32 consecutive weights of one row.
QK = 32
Q4_1_BLOCK_BYTES = 20  # f16 d, f16 m, 16 bytes of nibbles: w = d * q + m, q in 0..15
Q8_0_BLOCK_BYTES = 34  # f16 d, 32 int8: w = d * q
BLOCK_BYTES = {"Q4_1": Q4_1_BLOCK_BYTES, "Q8_0": Q8_0_BLOCK_BYTES}


class GGUFError(ModelFileError):
    """The file is not a GGUF model we can read (bad magic, missing key, unsupported type)."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    kind: str  # "F32", "F16", "Q4_1", "Q8_0"
    shape: tuple[int, ...]  # NumPy order, (rows, cols) for matrices
    raw: np.ndarray  # memory-mapped: the float array itself, or (rows, n_blocks * block_bytes) uint8

    @property
    def nbytes(self) -> int:
        return int(self.raw.nbytes)


class GGUFFile:
    """A memory-mapped GGUF file: ``metadata`` (key → Python value) and ``tensors`` (name → GGUFTensor)."""

    def __init__(self, path: str | Path):
        from gguf import GGUFReader  # import here: only GGUF users pay for it

        self.path = Path(path)
        if not self.path.is_file():
            raise GGUFError(f"{self.path}: no such file")
        try:
            reader = GGUFReader(self.path, "r")
        except (ValueError, OSError) as exc:  # the reader raises ValueError on a bad magic/version
            raise GGUFError(f"{self.path}: not a readable GGUF file ({exc})") from exc
        self.metadata: dict[str, object] = {}
        for key, field in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            self.metadata[key] = field.contents()
        self.tensors: dict[str, GGUFTensor] = {}
        for t in reader.tensors:
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            self.tensors[t.name] = GGUFTensor(t.name, t.tensor_type.name, shape, t.data)

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def require(self, key: str):
        if key not in self.metadata:
            raise GGUFError(f"{self.path}: metadata key {key!r} is missing")
        return self.metadata[key]

    def dequantize(self, name: str) -> np.ndarray:
        """The tensor as a new float32 array of ``shape``."""
        if name not in self.tensors:
            raise GGUFError(f"{self.path}: no tensor named {name!r}")
        return dequantize(self.tensors[name])


def dequantize(t: GGUFTensor) -> np.ndarray:
    """Vectorized dequantization of one tensor to float32 ``t.shape``."""
    if t.kind in ("F32", "F16"):
        return np.array(t.raw, dtype=np.float32).reshape(t.shape)
    if t.kind == "Q4_1":
        return dequantize_q4_1(t.raw).reshape(t.shape)
    if t.kind == "Q8_0":
        return dequantize_q8_0(t.raw).reshape(t.shape)
    raise GGUFError(f"tensor {t.name!r}: type {t.kind} is not supported (only F32, F16, Q4_1, Q8_0)")


def _blocks(raw: np.ndarray, block_bytes: int) -> np.ndarray:
    rows = raw.shape[0] if raw.ndim > 1 else 1
    return np.ascontiguousarray(raw).reshape(rows, -1, block_bytes)  # (rows, n_blocks, block_bytes)


def dequantize_q4_1(raw: np.ndarray) -> np.ndarray:
    """(rows, n_blocks*20) uint8 → (rows, n_blocks*32) float32. Low nibbles are weights 0..15 of a block, high 16..31."""
    b = _blocks(raw, Q4_1_BLOCK_BYTES)
    d = b[..., 0:2].copy().view(np.float16).astype(np.float32)  # (rows, nb, 1)
    m = b[..., 2:4].copy().view(np.float16).astype(np.float32)
    qs = b[..., 4:]  # (rows, nb, 16)
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)  # (rows, nb, 32)
    return (q * d + m).reshape(b.shape[0], -1)


def dequantize_q8_0(raw: np.ndarray) -> np.ndarray:
    """(rows, n_blocks*34) uint8 → (rows, n_blocks*32) float32."""
    b = _blocks(raw, Q8_0_BLOCK_BYTES)
    d = b[..., 0:2].copy().view(np.float16).astype(np.float32)  # (rows, nb, 1)
    q = b[..., 2:].copy().view(np.int8).astype(np.float32)  # (rows, nb, 32)
    return (q * d).reshape(b.shape[0], -1)


def dequantize_block_naive(kind: str, block: bytes) -> list[float]:
    """Reference: one block's 32 weights, read field by field as ggml-common.h declares them."""
    if kind == "Q4_1":
        d = float(np.frombuffer(block[0:2], np.float16)[0])
        m = float(np.frombuffer(block[2:4], np.float16)[0])
        out = [0.0] * QK
        for j in range(QK // 2):
            byte = block[4 + j]
            out[j] = (byte & 0x0F) * d + m
            out[j + QK // 2] = (byte >> 4) * d + m
        return out
    if kind == "Q8_0":
        d = float(np.frombuffer(block[0:2], np.float16)[0])
        return [int.from_bytes(block[2 + j : 3 + j], "little", signed=True) * d for j in range(QK)]
    raise GGUFError(f"no naive reference for {kind}")


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo the row permutation llama conversion applies to Q and K weights.

    Hugging Face's Llama rotates the two *halves* of each head (``rotate_half``); ggml's
    llama RoPE rotates *adjacent pairs*. The converter therefore reorders each head's rows
    from ``[x0..x31, y0..y31]`` to ``[x0, y0, x1, y1, ...]``. Reversing it gives back the HF
    layout, so our RoPE can rotate contiguous halves (two slices, no strided gathers).
    w: (n_heads * head_dim, in) → same shape.
    """
    rows, cols = w.shape
    head_dim = rows // n_heads
    return w.reshape(n_heads, head_dim // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def permute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The converter's permutation (HF halves → ggml pairs); kept to test ``unpermute_qk`` against."""
    rows, cols = w.shape
    head_dim = rows // n_heads
    return w.reshape(n_heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(rows, cols)
