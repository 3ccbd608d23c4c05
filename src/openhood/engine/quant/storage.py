"""Quantized weights on disk: one safetensors file, keyed by the source model's tensor names.

Layout of ``model.int8.safetensors`` (no pickle anywhere; safetensors metadata is str → str):

- ``<name>.int8`` int8 (out, in) and ``<name>.scale`` float32 (out,) for every quantized
  Linear weight and for the vocabulary table (per row), where ``<name>`` is the tensor's name
  in the source ``model.safetensors`` (e.g. ``encoder.layer.0.output.dense.weight``);
- ``<name>.input_scale`` float32 (1,) and ``<name>.input_zero_point`` uint8 (1,) for layers
  whose activations are quantized statically;
- every other tensor (biases, LayerNorm, fp32-kept layers) unchanged;
- metadata: ``format`` = ``openhood-int8``, ``plan`` (JSON: per-layer mode, reason, errors,
  ranges), ``layer_tensors`` (JSON: ONNX layer → source tensor names), ``quantization`` (JSON).

Keying by the *source* names means any loader that reads the original checkpoint reads this
one after ``load_quantized`` dequantizes it. The ONNX graph may fuse layers (one q|k|v MatMul),
so layers are matched to source tensors by value: per-output-channel codes of a row-wise
concatenation are the concatenation of the codes, so a fused layer splits back exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from safetensors import safe_open
from safetensors.numpy import save_file

from openhood.export.qdq import embedding_sites, linear_sites

INT8_FORMAT = "openhood-int8"
FP16_FORMAT = "openhood-fp16"


def match_layers(model: onnx.ModelProto, source: dict[str, np.ndarray]) -> dict[str, list[tuple[str, int]]]:
    """ONNX layer → [(source tensor name, first output row)], matched by exact values.

    A Linear weight (in, out) in the graph is the transpose of one source tensor (out, in) or of
    several stacked along out (fused q|k|v); an embedding table is a source tensor as is.
    """
    by_first_row: dict[bytes, list[str]] = {}
    for name, t in source.items():
        if t.ndim == 2 and t.dtype == np.float32 and len(t):
            by_first_row.setdefault(t[0].tobytes(), []).append(name)
    inits = {t.name: t for t in model.graph.initializer}
    tables = [(s.layer, numpy_helper.to_array(inits[s.weight]).T) for s in linear_sites(model)]
    tables += [(s.layer, numpy_helper.to_array(inits[s.table])) for s in embedding_sites(model)]
    out: dict[str, list[tuple[str, int]]] = {}
    for layer, rows in tables:  # rows: (out, in)
        parts, offset = [], 0
        while offset < len(rows):
            found = next(
                (n for n in by_first_row.get(rows[offset].tobytes(), [])
                 if source[n].shape[1] == rows.shape[1] and np.array_equal(source[n], rows[offset : offset + len(source[n])])),
                None,
            )
            if found is None:
                raise ValueError(f"layer {layer}: rows {offset}.. match no tensor of the source checkpoint")
            parts.append((found, offset))
            offset += len(source[found])
        out[layer] = parts
    return out


def save_int8(path: str | Path, source: dict[str, np.ndarray], model: onnx.ModelProto, result, info: dict) -> Path:
    """Write ``result`` (a ``QuantResult``) over the ``source`` checkpoint's names to ``path``."""
    mapping = match_layers(model, source)
    tensors: dict[str, np.ndarray] = {}
    replaced: set[str] = set()
    quantized = {name: (lq.codes, lq.scale, lq) for name, lq in result.layers.items() if lq.mode != "fp32"}
    quantized.update({name: (codes, scale, None) for name, (codes, scale) in result.embeddings.items()})
    for layer, (codes, scale, lq) in quantized.items():
        for tensor, offset in mapping[layer]:
            rows = len(source[tensor])
            tensors[f"{tensor}.int8"] = np.ascontiguousarray(codes[offset : offset + rows])
            tensors[f"{tensor}.scale"] = np.ascontiguousarray(scale[offset : offset + rows])
            if lq is not None and lq.mode == "static":
                tensors[f"{tensor}.input_scale"] = np.array([lq.input_scale], dtype=np.float32)
                tensors[f"{tensor}.input_zero_point"] = np.array([lq.input_zero_point], dtype=np.uint8)
            replaced.add(tensor)
    for name, t in source.items():
        if name not in replaced:
            tensors[name] = np.ascontiguousarray(t)
    metadata = {
        "format": INT8_FORMAT,
        "plan": json.dumps(result.plan_json()),
        "layer_tensors": json.dumps({k: [n for n, _ in v] for k, v in mapping.items()}),
        "quantization": json.dumps(info),
    }
    path = Path(path)
    save_file(tensors, str(path), metadata=metadata)
    return path


def save_fp16(path: str | Path, source: dict[str, np.ndarray]) -> Path:
    """Every float32 tensor stored as float16 (others unchanged): half the size, ~3 significant digits."""
    tensors = {n: (t.astype(np.float16) if t.dtype == np.float32 else t) for n, t in source.items()}
    save_file(tensors, str(path), metadata={"format": FP16_FORMAT})
    return Path(path)


def read_metadata(path: str | Path) -> dict[str, str]:
    with safe_open(str(path), framework="numpy") as f:
        return dict(f.metadata() or {})


def load_quantized(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """An int8 or fp16 file → (float32 tensors under the source names, metadata).

    int8 weights are dequantized here (``codes × scale`` per row): the NumPy engine runs
    float32 GEMMs on them (weight-only quantization, see docs/design.md).
    """
    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata() or {})
        fmt = meta.get("format")
        if fmt not in (INT8_FORMAT, FP16_FORMAT):
            raise ValueError(f"{path} is not an openhood int8/fp16 file (metadata format={fmt!r})")
        raw = {k: f.get_tensor(k) for k in f.keys()}
    out: dict[str, np.ndarray] = {}
    for name, t in raw.items():
        if name.endswith(".int8"):
            base = name[: -len(".int8")]
            out[base] = t.astype(np.float32) * raw[f"{base}.scale"].astype(np.float32)[:, None]
        elif name.endswith((".scale", ".input_scale", ".input_zero_point")) and f"{name.rsplit('.', 1)[0]}.int8" in raw:
            continue
        else:
            out[name] = t.astype(np.float32) if t.dtype == np.float16 else t
    return out, meta
