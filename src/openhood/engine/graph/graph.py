"""A tiny op graph: a topologically ordered list of named nodes over named values.

Why a graph and not a hand-written ``forward()``: fusion passes rewrite it, the profiler times
it node by node, the ONNX exporter walks it, and a quantized ``Linear`` replaces a float one by
name (``layer.3.ffn.up``). The trade-off: no general shape inference or scheduling: nodes run
in list order and each op's kernel knows its own shapes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openhood.engine.kernels.linear import Linear


@dataclass
class Node:
    """One op. ``linear`` holds the dense layer of Linear-family ops; ``params`` other weights."""

    name: str  # unique, e.g. "layer.0.attention.qkv"
    op: str  # "Linear", "Attention", "LayerNorm", … (see engine.graph.runtime.KERNELS)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)
    linear: Any = None  # a Linear or any object with Linear's contract

    @property
    def label(self) -> str:
        """Op type as the profiler groups it: fused epilogues show as ``Linear+Gelu``."""
        act = self.attrs.get("activation")
        return f"{self.op}+{act.capitalize()}" if act else self.op


@dataclass
class Graph:
    nodes: list[Node]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)  # hidden size, heads, eps, fusions applied …

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r} in the graph")

    def linears(self) -> dict[str, Any]:
        """Node name → its Linear (or replacement), in execution order."""
        return {n.name: n.linear for n in self.nodes if n.linear is not None}

    def replace_linear(self, name: str, linear: Any) -> None:
        """Swap the dense layer of node ``name`` (e.g. for an int8 one); shapes must match."""
        node = self.node(name)
        if node.linear is None:
            raise ValueError(f"node {name!r} ({node.op}) has no Linear to replace")
        old = node.linear
        if (linear.in_features, linear.out_features) != (old.in_features, old.out_features):
            raise ValueError(
                f"replacement for {name!r} is {linear.in_features}->{linear.out_features}, "
                f"expected {old.in_features}->{old.out_features}"
            )
        node.linear = linear

    def consumers(self) -> dict[str, list[Node]]:
        """Value name → the nodes reading it (graph outputs count as a consumer-less use)."""
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                uses.setdefault(v, []).append(n)
        return uses

    def producer(self) -> dict[str, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    def clone(self) -> Graph:
        """Copy the structure; weight arrays are shared (passes build new ones when they change)."""
        nodes = [
            Node(n.name, n.op, tuple(n.inputs), tuple(n.outputs), copy.deepcopy(n.attrs), dict(n.params), n.linear)
            for n in self.nodes
        ]
        return Graph(nodes, tuple(self.inputs), tuple(self.outputs), copy.deepcopy(self.meta))

    def summary(self) -> str:
        lines = [f"graph: {len(self.nodes)} nodes, inputs {self.inputs}, outputs {self.outputs}"]
        for n in self.nodes:
            extra = f" [{n.linear!r}]" if n.linear is not None else ""
            lines.append(f"  {n.name:<32} {n.label:<22} {','.join(n.inputs)} -> {','.join(n.outputs)}{extra}")
        return "\n".join(lines)


__all__ = ["Graph", "Linear", "Node"]
