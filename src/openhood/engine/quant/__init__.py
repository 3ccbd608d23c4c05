"""openhood.engine.quant: post-training int8 quantization and fp16 storage for the engine.

``apply_precision(graph, precision, model_dir)`` is the hook ``openhood.backends`` calls after
fusion: ``"fp16"`` swaps every Linear for an ``Fp16Linear``; ``"int8"`` applies the plan in
``<model_dir>/model.int8.safetensors`` written by ``openhood quantize``. Modules: ``ops``
(quantization arithmetic), ``observers`` (calibration ranges), ``calibration`` (length-matched
sampling), ``linear`` (Int8Linear / Fp16Linear), ``plan`` (per-layer decisions → graph), ``quantizer``
(calibration, sensitivity pass, planning),
``storage`` (safetensors), ``evaluate`` (quality metrics); the command is ``openhood.cli.quantize``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from openhood.formats.errors import ModelFileError

if TYPE_CHECKING:
    from openhood.engine.graph.graph import Graph

PRECISIONS = ("fp32", "fp16", "int8")


def apply_precision(graph: Graph, precision: str, model_dir: str | Path | None) -> Graph:
    """The fused fp32 graph → the same graph at ``precision``; ValueError for unknown ones."""
    from openhood.engine.quant.storage import INT8_FILE, apply_fp16, apply_int8

    if precision == "fp32":
        return graph
    if precision == "fp16":
        return apply_fp16(graph)
    if precision == "int8":
        if model_dir is None:
            raise ValueError("precision int8 needs the model folder that holds its plan")
        path = Path(model_dir) / INT8_FILE
        if not path.is_file():
            raise ModelFileError(
                f"precision int8 needs {path}: create it with `openhood quantize --model {model_dir} "
                f"--calibration corpus.jsonl --out DIR` and load the model from DIR"
            )
        return apply_int8(graph, path)
    raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")


__all__ = ["PRECISIONS", "apply_precision"]
