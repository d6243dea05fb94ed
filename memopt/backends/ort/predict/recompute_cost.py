"""What recomputing a plan costs: the time of its subgraph's nodes, in seconds, at any dims.

A recomputed node runs the same kernel on the same shapes as the forward node it clones. On
CPU the calibration run profiles every node (``memopt.backends.ort.profile``): a node's measured
time, scaled by its work from the calibration run's dims to the target's, is its cost.

A node without a measured time (a CUDA run, a `--cmd` job, a stack whose profiler memopt cannot reach)
falls back to its work: FLOPs for MatMul/FusedMatMul/Gemm (2 · |A| · N, which holds whatever
the transposes), bytes read and written for everything else, weighted by the device's
FLOPs-per-byte balance, in seconds by one factor calibrated on a measured no-config step
(the whole training graph's work takes the median step time).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from memopt.backends.ort.graph.training_graph import Node, TrainingGraph
from memopt.backends.ort.scan.detect import element_size

__all__ = ["BALANCE", "RecomputeCost", "Work", "graph_work", "nodes_work", "read_node_times", "seconds_per_unit"]

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


@dataclass(frozen=True)
class RecomputeCost:
    """Seconds a set of recomputed nodes adds to a step, at any dims of ``graph``."""

    graph: TrainingGraph
    balance: float  # FLOPs per byte, for the work of nodes without a measured time
    seconds_per_unit: float  # seconds per work unit, likewise
    measured: Mapping[str, float] = field(default_factory=dict)  # node -> seconds per step at measured_dims
    measured_dims: Mapping[str, int] = field(default_factory=dict)

    def seconds(self, names: Iterable[str], dims: Mapping[str, int]) -> float:
        by_name = _names(self.graph)
        total = 0.0
        for name in dict.fromkeys(names):  # a node several recomputed subgraphs share is cloned once
            node = by_name.get(name)
            if node is None:
                continue
            units = _node_work(self.graph, node, dims).units(self.balance)
            measured = self.measured.get(name)
            if measured is None:
                total += units * self.seconds_per_unit
                continue
            at_measured = _node_work(self.graph, node, self.measured_dims).units(self.balance)
            total += measured * units / at_measured if at_measured > 0 else measured
        return total


def read_node_times(path: Path) -> dict[str, float]:
    """The node times a profiled run wrote (``memopt.backends.ort.profile``); empty where it wrote none."""
    try:
        seconds = json.loads(path.read_text()).get("node_seconds")
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(seconds, dict):
        return {}
    return {str(name): float(value) for name, value in seconds.items() if isinstance(value, (int, float))}


def nodes_work(graph: TrainingGraph, names: Iterable[str], dims: Mapping[str, int]) -> Work:
    by_name = _names(graph)
    total = Work(0.0, 0.0)
    for name in dict.fromkeys(names):  # a node several recomputed subgraphs share is cloned once
        node = by_name.get(name)
        if node is not None:
            total = total + _node_work(graph, node, dims)
    return total


def graph_work(graph: TrainingGraph, dims: Mapping[str, int]) -> Work:
    """Every node of the training graph (forward, backward, optimizer excluded)."""
    return nodes_work(graph, (node.name for node in graph.nodes), dims)


def seconds_per_unit(step_s: float, graph: TrainingGraph, dims: Mapping[str, int], balance: float) -> float:
    units = graph_work(graph, dims).units(balance)
    return step_s / units if units > 0 else 0.0


def _names(graph: TrainingGraph) -> dict[str, Node]:
    cached = getattr(graph, "_memopt_by_name", None)
    if cached is None:
        cached = {node.name: node for node in graph.nodes}
        graph._memopt_by_name = cached  # type: ignore[attr-defined]
    return cached


def _shape(graph: TrainingGraph, name: str, dims: Mapping[str, int]) -> list[float] | None:
    """The tensor's dims at ``dims``; a dim with no value counts as 1 (it does not scale with batch)."""
    shape = graph.tensor(name).dims
    if shape is None:
        return None
    return [float(d) if isinstance(d, int) else float(dims.get(d, 1)) if isinstance(d, str) else 1.0 for d in shape]


def _numel(graph: TrainingGraph, name: str, dims: Mapping[str, int]) -> float:
    shape = _shape(graph, name, dims)
    return math.prod(shape) if shape is not None else 0.0


def _bytes(graph: TrainingGraph, name: str, dims: Mapping[str, int]) -> float:
    return _numel(graph, name, dims) * (element_size(graph.tensor(name).elem_type) or 4)


def _node_work(graph: TrainingGraph, node: Node, dims: Mapping[str, int]) -> Work:
    if node.op_type in _MATMULS and len(node.inputs) >= 2 and node.outputs:
        return Work(2.0 * _numel(graph, node.outputs[0], dims) * _reduced_dim(graph, node, dims), 0.0)
    moved = sum(_bytes(graph, t, dims) for t in (*node.inputs, *node.outputs) if t)
    return Work(0.0, moved)


def _reduced_dim(graph: TrainingGraph, node: Node, dims: Mapping[str, int]) -> float:
    """K of a matrix product whose output has |out| elements: FLOPs are 2·|out|·K.

    The graph keeps no attributes, so K comes from shapes: A's last two dims are M·K in
    either orientation (Gemm's and FusedMatMul's transA), and M is the output's second-to-last.
    """
    a = _shape(graph, node.inputs[0], dims)
    b = _shape(graph, node.inputs[1], dims)
    out = _shape(graph, node.outputs[0], dims)
    if not a:
        return 1.0
    if len(a) == 1 or (b is not None and len(b) == 1):
        return a[-1]  # a vector on either side: K is A's last dim
    if out is None or len(out) < 2 or out[-2] == 0:
        return a[-1]
    return a[-1] * a[-2] / out[-2]
