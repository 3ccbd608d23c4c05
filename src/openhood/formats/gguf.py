"""Read a GGUF file (llama.cpp's format): metadata, tensors, and Q4_1 / Q8_0 dequantization.

The container is parsed here, over one read-only ``mmap``: the header, the key/value metadata
and the tensor index are read with ``struct`` and ``np.frombuffer`` (one call per value or per
array), and each tensor is a view of the page cache until something dequantizes it. The
``gguf`` package's ``GGUFReader`` reads the same bytes but builds a NumPy memmap slice per
field part (~250k of them for SmolLM2's 49k-token vocabulary): ~3 s of a 6 s decoder start on
this 2-core box, against ~0.1 s here (docs/design.md, "Start-up"). The trade-off: ~80 lines of
format code we own, kept honest by a test that compares every key and tensor with
``GGUFReader`` on the bundled model. What we also own is what the numbers mean: the block
layouts of the two quantized types SmolLM2's file uses, each with a naive per-block reference
beside the vectorized version, and the Q/K row permutation that llama-family conversion applies.

Shapes: GGUF lists dimensions innermost first (``[576, 49152]`` for the embedding); here a
tensor's ``shape`` is NumPy order ``(rows, cols)`` = ``(out_features, in_features)``, the same
as a PyTorch ``nn.Linear`` weight, and quantization blocks run along ``cols``.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from openhood.formats.errors import ModelFileError

# Block layouts (ggml-common.h). Each block covers 32 consecutive weights of one row.
QK = 32
Q4_1_BLOCK_BYTES = 20  # f16 d, f16 m, 16 bytes of nibbles: w = d * q + m, q in 0..15
Q8_0_BLOCK_BYTES = 34  # f16 d, 32 int8: w = d * q
BLOCK_BYTES = {"Q4_1": Q4_1_BLOCK_BYTES, "Q8_0": Q8_0_BLOCK_BYTES}

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# ggml's tensor types: id → (name, weights per block, bytes per block) (ggml.h, GGML_QUANT_SIZES).
# Every type is listed so any file opens; only F32, F16, Q4_1 and Q8_0 dequantize.
QK_K = 256
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, Q4_1_BLOCK_BYTES),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, Q8_0_BLOCK_BYTES),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", QK_K, 4 + QK_K // 16 + QK_K // 4),
    11: ("Q3_K", QK_K, 2 + QK_K // 4 + QK_K // 8 + 12),
    12: ("Q4_K", QK_K, 4 + QK_K // 2 + 12),
    13: ("Q5_K", QK_K, 4 + QK_K // 2 + QK_K // 8 + 12),
    14: ("Q6_K", QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    15: ("Q8_K", QK_K, 4 + QK_K + QK_K // 8),
    16: ("IQ2_XXS", QK_K, 2 + QK_K // 4),
    17: ("IQ2_XS", QK_K, 2 + QK_K // 4 + QK_K // 32),
    18: ("IQ3_XXS", QK_K, 2 + QK_K // 4 + QK_K // 8),
    19: ("IQ1_S", QK_K, 2 + QK_K // 8 + QK_K // 16),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    22: ("IQ2_S", QK_K, 2 + QK_K // 4 + QK_K // 16),
    23: ("IQ4_XS", QK_K, 4 + QK_K // 2 + QK_K // 64),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", QK_K, 2 + 4 * 13),
    35: ("TQ2_0", QK_K, 2 + 64),
    39: ("MXFP4", 32, 17),
}
# Types whose raw view is an array of that element type; every other type is raw bytes.
ELEMENT_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8"}
# Metadata value types (gguf.GGUFValueType): numeric id → little-endian dtype; 8 string, 9 array.
VALUE_DTYPES = {
    0: "u1",
    1: "i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "?",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
STRING, ARRAY = 8, 9


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
        self.path = Path(path)
        if not self.path.is_file():
            raise GGUFError(f"{self.path}: no such file")
        with open(self.path, "rb") as f:
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # outlives f: views keep it
            except ValueError as exc:  # an empty file cannot be mapped
                raise GGUFError(f"{self.path}: not a readable GGUF file ({exc})") from exc
        try:
            self.metadata, self.tensors = _parse(self._map)
        except (ValueError, struct.error, UnicodeDecodeError, IndexError, KeyError) as exc:
            raise GGUFError(f"{self.path}: not a readable GGUF file ({exc})") from exc

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


class _Cursor:
    """Reads little-endian values from ``buf`` at a moving offset."""

    def __init__(self, buf: mmap.mmap, at: int = 0):
        self.buf, self.at = buf, at

    def unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.buf, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def string(self) -> str:
        (n,) = self.unpack("<Q")
        if self.at + n > len(self.buf):
            raise ValueError(f"a string of {n} bytes runs past the end of the file")
        self.at += n
        return self.buf[self.at - n : self.at].decode("utf-8")

    def strings(self, count: int) -> list[str]:
        buf, at, end, out = self.buf, self.at, len(self.buf), []
        length = struct.Struct("<Q").unpack_from
        for _ in range(count):
            (n,) = length(buf, at)
            at += 8 + n
            if at > end:
                raise ValueError(f"a string of {n} bytes runs past the end of the file")
            out.append(buf[at - n : at].decode("utf-8"))
        self.at = at
        return out

    def array(self, dtype: str, count: int) -> np.ndarray:
        a = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.at)
        self.at += a.nbytes
        return a

    def value(self, vtype: int) -> object:
        """One metadata value: a Python scalar, a str, or a flat list (nested arrays are flattened,
        as ``GGUFReader.contents()`` returns them)."""
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            itype, n = self.unpack("<IQ")
            if itype in VALUE_DTYPES:
                return self.array(VALUE_DTYPES[itype], n).tolist()
            if itype == STRING:  # a vocabulary: ~100k strings, so one tight loop, no call per item
                return self.strings(n)
            items = [self.value(itype) for _ in range(n)]
            return [x for item in items for x in cast(list, item)] if itype == ARRAY else items
        if vtype in VALUE_DTYPES:
            return self.array(VALUE_DTYPES[vtype], 1).tolist()[0]
        raise ValueError(f"unknown metadata value type {vtype}")


def _parse(buf: mmap.mmap) -> tuple[dict[str, object], dict[str, GGUFTensor]]:
    """Header, metadata and tensor index of a GGUF file (little-endian, version 2 or 3)."""
    c = _Cursor(buf)
    if buf[:4] != MAGIC:
        raise ValueError("GGUF magic invalid")
    c.at = 4
    version, n_tensors, n_kv = c.unpack("<IQQ")
    if version not in VERSIONS:
        raise ValueError(f"version {version} is not supported (big-endian files are not either)")
    metadata: dict[str, object] = {}
    for _ in range(n_kv):
        key = c.string()
        if key in metadata:
            raise ValueError(f"duplicate metadata key {key!r}")
        (vtype,) = c.unpack("<I")
        metadata[key] = c.value(vtype)
    index = []
    for _ in range(n_tensors):
        name = c.string()
        (n_dims,) = c.unpack("<I")
        dims = c.unpack(f"<{n_dims}Q")  # innermost first
        type_id, offset = c.unpack("<IQ")
        index.append((name, dims, type_id, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"invalid alignment {alignment!r}: must be a power of two")
    data_start = -(-c.at // alignment) * alignment
    tensors: dict[str, GGUFTensor] = {}
    for name, dims, type_id, offset in index:
        if name in tensors:
            raise ValueError(f"duplicate tensor {name!r}")
        kind, block, block_bytes = GGML_TYPES[type_id]
        shape = tuple(int(d) for d in reversed(dims))  # NumPy order
        n = int(np.prod(shape))
        if kind in ELEMENT_DTYPES:
            raw_shape, dtype = shape, ELEMENT_DTYPES[kind]
        else:
            if shape[-1] % block:
                raise ValueError(f"tensor {name!r}: a row of {shape[-1]} is not whole {kind} blocks of {block}")
            raw_shape, dtype = (*shape[:-1], shape[-1] // block * block_bytes), "u1"
        raw = np.frombuffer(
            buf, dtype=dtype, count=n * block_bytes // block // np.dtype(dtype).itemsize, offset=data_start + offset
        )
        tensors[name] = GGUFTensor(name, kind, shape, raw.reshape(raw_shape))
    return metadata, tensors


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
    # The nibbles are written straight into the float32 output and scaled in place: no
    # concatenated copy and no temporaries (5x faster at load than q * d + m, the same floats).
    out = np.empty((*qs.shape[:2], QK), dtype=np.float32)  # (rows, nb, 32)
    np.bitwise_and(qs, 0x0F, out=out[..., : QK // 2], casting="unsafe")
    np.right_shift(qs, 4, out=out[..., QK // 2 :], casting="unsafe")
    out *= d
    out += m
    return out.reshape(b.shape[0], -1)


def dequantize_q8_0(raw: np.ndarray) -> np.ndarray:
    """(rows, n_blocks*34) uint8 → (rows, n_blocks*32) float32."""
    b = _blocks(raw, Q8_0_BLOCK_BYTES)
    d = b[..., 0:2].copy().view(np.float16).astype(np.float32)  # (rows, nb, 1)
    out = np.empty((*b.shape[:2], QK), dtype=np.float32)  # (rows, nb, 32)
    out[...] = b[..., 2:].view(np.int8)
    out *= d
    return out.reshape(b.shape[0], -1)


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
