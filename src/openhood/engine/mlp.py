"""A small MLP as an op graph: the article's 784 → 256 → 10 classifier (ReLU, softmax head).

It exists to exercise the Linear+ReLU and Linear+Softmax fusions and the profiler on something
that is not a Transformer; weights are random (He init), seeded, so results are reproducible.
The trade-off: inference only: training it is out of this package's scope.
"""

from __future__ import annotations

import itertools

import numpy as np

from openhood.engine.graph import Graph, Node
from openhood.engine.linear import Linear


def build_mlp(sizes: tuple[int, ...] = (784, 256, 10), seed: int = 0) -> Graph:
    """Linear → ReLU → … → Linear → Softmax over inputs named ``x`` (B, sizes[0])."""
    rng = np.random.default_rng(seed)
    nodes: list[Node] = []
    value = "x"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        w = rng.standard_normal((fan_in, fan_out)).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        b = rng.standard_normal(fan_out).astype(np.float32) * np.float32(0.01)
        last = i == len(sizes) - 2
        nodes.append(Node(f"mlp.{i}", "Linear", (value,), (f"z.{i}",), linear=Linear(w, b)))
        act = "Softmax" if last else "Relu"
        out = "probs" if last else f"a.{i}"
        nodes.append(Node(f"mlp.{i}.act", act, (f"z.{i}",), (out,)))
        value = out
    return Graph(nodes, ("x",), ("probs",), {"fusions": []})
