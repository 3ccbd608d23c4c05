"""ONNX Runtime sessions, built one way: the options every session of openhood runs with.

``session_options`` is the one place the threading and optimization settings live (the ONNX
Runtime backend, the quantizer's checks and the benchmarks all build sessions through it):
``threads`` intra-op threads (default: the cores available), one inter-op thread, sequential
execution, and all graph optimizations, because the int8 fusions (``MatMulIntegerToFloat``,
``DynamicQuantizeMatMul``) only happen at that level; and the memory settings (CPU arena,
memory pattern: chosen from a measurement, below). ``make_session`` and ``embed_batches``
run a graph of ours (int64 ``input_ids`` and ``attention_mask`` in) on token batches; the
trade-off: CPU execution provider only, which is all this project's machines have.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import onnx

from openhood.engine.kernels.cores import available_cores

Batch = tuple[np.ndarray, np.ndarray]  # (input_ids (B, T) int64, attention_mask (B, T) int64)

# Memory with variable input shapes (benchmarks/ort_memory.py; docs/benchmarks.md, "ONNX
# Runtime memory"). The CPU arena keeps what it grew for the largest (B, T) seen, but every
# shape here is bounded (batch ≤ the scheduler's max batch, T ≤ the model's max length), so it
# plateaus: with both on, RSS rose +1.1% from warm-up to the end of 150 random shapes and +0.3%
# in the second half, the fastest setting. Arena off hands every run's tensors to malloc, whose
# RSS swung ±7% between samples and was ~1.2x slower. So: ORT's defaults, set explicitly here
# (the one place), with the shrink-after-run alternative kept for the benchmark to compare.
CPU_MEM_ARENA = True
MEM_PATTERN = True
ARENA_SHRINK = False  # give the arena's free blocks back after every run (RunOptions)
# ORT's intra-op pool threads spin between parallel sections (fast, kept) and, by default, go on
# spinning after a run returns, waiting for the next one: a core burnt for nothing, taken from
# the other engines of the server (per-worker sessions and the wide one share the cores).
# False: ``session.force_spinning_stop`` puts them to sleep as soon as the run returns.
# benchmarks/ort_spin.py (4 Dec 16:52, 3 rounds alternating): CPU in the second after one lone
# request 0.060 s spinning vs 0.000 stopped; one client's P50 18.13 vs 15.59 ms (no cost seen).
SPIN_AFTER_RUN = False


def session_options(threads: int | None = None):
    """``onnxruntime.SessionOptions`` with openhood's settings; ``threads`` None = every core."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or available_cores()
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_cpu_mem_arena = CPU_MEM_ARENA
    so.enable_mem_pattern = MEM_PATTERN
    if not SPIN_AFTER_RUN:
        so.add_session_config_entry("session.force_spinning_stop", "1")
    return so


def run_options():
    """``onnxruntime.RunOptions`` for every ``session.run`` (None: ORT's defaults)."""
    if not (CPU_MEM_ARENA and ARENA_SHRINK):
        return None
    import onnxruntime as ort

    ro = ort.RunOptions()
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return ro


def make_session(model: onnx.ModelProto | bytes | str | Path, threads: int | None = None):
    """A CPU session over a model, its bytes or a file path; ``threads`` None or 0 = every core."""
    import onnxruntime as ort

    opts = session_options(threads or None)
    opts.log_severity_level = 3  # shape-merge warnings on dynamic dims are noise here
    data = (
        model.SerializeToString()
        if isinstance(model, onnx.ModelProto)
        else str(model)
        if isinstance(model, Path)
        else model
    )
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def embed_batches(session, batches: Iterable[Batch], output: str | None = None) -> np.ndarray:
    """Run every batch through a graph of ours (inputs: int64 input_ids, attention_mask);
    concatenate the first (or named) output → (N, dim) float32."""
    name = output or session.get_outputs()[0].name
    parts = [
        session.run([name], {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)})[0]
        for ids, mask in batches
    ]
    return np.concatenate(parts).astype(np.float32)


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns the named intermediate tensors."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    existing = {o.name for o in model.graph.output}
    for n in names:
        if n not in existing:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
            existing.add(n)
    return model
