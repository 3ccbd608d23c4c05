"""MLPs as op graphs: the article's 784 → 256 → 10 classifier (random, seeded) and trained ones.

``build_mlp`` makes the article's network with random He-initialised weights, to exercise the
Linear+ReLU and Linear+Softmax fusions and the profiler on something that is not a Transformer.
``load_mlp`` reads a folder written by ``openhood train`` (``model.safetensors`` + ``config.json``,
checked by ``openhood.train.checkpoint``) and folds the stored input scaler into the first
layer: ``(x - mean) / std @ W + b = x @ (W / std) + (b - (mean / std) @ W)``, computed in float64
and cast once, so the served graph takes the raw features (0–16 pixels for the digits) and is
nothing but Linear → ReLU → … → Linear → Softmax. The trade-off: the folded first layer differs
from the trained one by float32 rounding (~1e-7 relative), measured in the parity tests.

Every layer is a ``PanelLinear`` where the kernel runs: the weight is packed once into the
panels of ``engine.kernels.panel_gemm`` instead of being re-packed by OpenBLAS on every call, and after
fusion each node (Linear+ReLU, and the 10-class head's Linear+Softmax) is one kernel call with
the bias and activation applied to the register tile. ``packed=False`` gives the all-BLAS graph
(np.matmul + the row kernels) the tests compare it with.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from openhood.engine.graph.graph import Graph, Node
from openhood.engine.kernels.linear import Linear
from openhood.engine.kernels.panel_gemm import PanelLinear

INPUT_NAME = "x"  # (B, features) float32
OUTPUT_NAME = "probs"  # (B, classes) float32


def dense(w: np.ndarray, b: np.ndarray, packed: bool = True) -> Linear:
    """The layer for (weight (in, out), bias (out,)): panel-packed where the kernel runs, else BLAS."""
    return PanelLinear(w, b) if packed and PanelLinear.suits(w) else Linear(w, b)


def mlp_graph(layers: list[tuple[np.ndarray, np.ndarray]], packed: bool = True) -> Graph:
    """Linear → ReLU → … → Linear → Softmax from (weight (in, out), bias (out,)) pairs, unfused."""
    nodes: list[Node] = []
    value = INPUT_NAME
    for i, (w, b) in enumerate(layers):
        last = i == len(layers) - 1
        nodes.append(Node(f"mlp.{i}", "Linear", (value,), (f"z.{i}",), linear=dense(w, b, packed)))
        out = OUTPUT_NAME if last else f"a.{i}"
        nodes.append(Node(f"mlp.{i}.act", "Softmax" if last else "Relu", (f"z.{i}",), (out,)))
        value = out
    return Graph(nodes, (INPUT_NAME,), (OUTPUT_NAME,), {"fusions": []})


def build_mlp(sizes: tuple[int, ...] = (784, 256, 10), seed: int = 0, packed: bool = True) -> Graph:
    """The article's network with random weights: He-normal, small random biases."""
    rng = np.random.default_rng(seed)
    layers = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        w = rng.standard_normal((fan_in, fan_out)).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        b = rng.standard_normal(fan_out).astype(np.float32) * np.float32(0.01)
        layers.append((w, b))
    return mlp_graph(layers, packed)


@dataclass
class TrainedMLP:
    """A folder from ``openhood train``, ready to serve: scaler folded into the first layer."""

    folder: Path
    config: dict[str, Any]
    layers: list[tuple[np.ndarray, np.ndarray]]  # (W (in, out), b (out,)) float32, raw-feature input

    @property
    def n_features(self) -> int:
        return int(self.config["sizes"][0])

    @property
    def labels(self) -> list[str]:
        return [str(label) for label in self.config["labels"]]

    @property
    def image_shape(self) -> tuple[int, int] | None:
        shape = self.config.get("image_shape")
        return (int(shape[0]), int(shape[1])) if shape else None

    def graph(self, packed: bool = True) -> Graph:
        """A fresh unfused graph (``backends.prepare_graph`` fuses it)."""
        return mlp_graph(self.layers, packed)


def fold_scaler(w: np.ndarray, b: np.ndarray, mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First layer over raw features: W' = W / std (per input row), b' = b - (mean / std) @ W."""
    w64, inv = w.astype(np.float64), 1.0 / std.astype(np.float64)
    folded_w = w64 * inv[:, None]  # (in, out)
    folded_b = b.astype(np.float64) - (mean.astype(np.float64) * inv) @ w64  # (out,)
    return folded_w.astype(np.float32), folded_b.astype(np.float32)


def load_mlp(folder: str | Path) -> TrainedMLP:
    """A trained MLP folder → ``TrainedMLP``; ``CheckpointError`` (a ValueError) names what is wrong."""
    from openhood.train.checkpoint import load_model

    folder = Path(folder)
    model, config = load_model(folder, dtype=np.float32)
    tensors = model.tensors()
    layers = [(tensors[f"layers.{i}.weight"], tensors[f"layers.{i}.bias"]) for i in range(len(model.linears))]
    layers[0] = fold_scaler(*layers[0], tensors["input.mean"], tensors["input.std"])
    return TrainedMLP(folder, config, layers)
