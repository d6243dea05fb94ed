"""What recomputing a plan costs: work of its subgraph, from the graph's shapes, in seconds.

Work of a node: FLOPs for MatMul/FusedMatMul/Gemm (2 · |A| · N, which holds whatever the
transposes), bytes read and written for everything else, weighted by the device's
FLOPs-per-byte balance. Seconds come from one factor calibrated on a measured no-config
step (the whole training graph's work takes the median step time) and refined by trials
with plans on (extra step time over predicted cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memopt.graph.training_graph import Node, TrainingGraph
from memopt.scan.detect import element_size

__all__ = ["BALANCE", "Work", "graph_work", "nodes_work", "seconds_per_unit"]

_MATMULS = frozenset({"MatMul", "FusedMatMul", "Gemm"})
# FLOPs a device does in the time it moves one byte (rough machine balance).
BALANCE = {"cpu": 4.0, "cuda": 20.0}


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float

    def units(self, balance: float) -> float:
        """Work in FLOP-equivalents."""
        return self.flops + balance * self.bytes

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.bytes + other.bytes)


def nodes_work(graph: TrainingGraph, names: Iterable[str], dims: Mapping[str, int]) -> Work:
    by_name = _names(graph)
    total = Work(0.0, 0.0)
    for name in names:
        node = by_name.get(name)
        if node is not None:
            total = total + _node_work(graph, node, dims)
    return total


def graph_work(graph: TrainingGraph, dims: Mapping[str, int]) -> Work:
    """Every node of the training graph (forward, backward, optimizer excluded)."""
    total = Work(0.0, 0.0)
    for node in graph.nodes:
        total = total + _node_work(graph, node, dims)
    return total


def seconds_per_unit(step_s: float, graph: TrainingGraph, dims: Mapping[str, int], balance: float) -> float:
    units = graph_work(graph, dims).units(balance)
    return step_s / units if units > 0 else 0.0


def _names(graph: TrainingGraph) -> dict[str, Node]:
    cached = getattr(graph, "_memopt_by_name", None)
    if cached is None:
        cached = {node.name: node for node in graph.nodes}
        graph._memopt_by_name = cached  # type: ignore[attr-defined]
    return cached


def _numel(graph: TrainingGraph, name: str, dims: Mapping[str, int]) -> float:
    shape = graph.tensor(name).dims
    if shape is None:
        return 0.0
    count = 1.0
    for d in shape:
        count *= d if isinstance(d, int) else dims.get(d, 1) if isinstance(d, str) else 1
    return count


def _bytes(graph: TrainingGraph, name: str, dims: Mapping[str, int]) -> float:
    return _numel(graph, name, dims) * (element_size(graph.tensor(name).elem_type) or 4)


def _node_work(graph: TrainingGraph, node: Node, dims: Mapping[str, int]) -> Work:
    if node.op_type in _MATMULS and node.inputs and node.outputs:
        out = graph.tensor(node.outputs[0]).dims
        n = out[-1] if out else 1
        n = n if isinstance(n, int) else dims.get(n, 1) if isinstance(n, str) else 1
        return Work(2.0 * _numel(graph, node.inputs[0], dims) * n, 0.0)
    moved = sum(_bytes(graph, t, dims) for t in (*node.inputs, *node.outputs) if t)
    return Work(0.0, moved)
