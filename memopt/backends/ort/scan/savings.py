"""Bytes each plan frees, as polynomials in the graph's symbolic dims.

Two figures per plan: the exact one (every stashed output of the entry node counted)
and the one ORT prints, which counts only the last output in its candidate list
(a 1.17–1.19 quirk). That list is in hash order, so ORT's figure for a node with several
stashed outputs of different sizes can be any one of them; ``ort_choices`` keeps them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from memopt.backends.ort.graph.training_graph import Dim, TrainingGraph
from memopt.backends.ort.scan.detect import NodePlan, element_size
from memopt.backends.ort.scan.modules import module_path
from memopt.graph.polynomial import Polynomial

__all__ = [
    "UNKNOWN_DIM_PREFIX",
    "UNKNOWN_SHAPE_SYMBOL",
    "NodePlanSaving",
    "OutputSaving",
    "UnknownDims",
    "plan_saving",
    "stashed_bytes",
]

UNKNOWN_SHAPE_SYMBOL = "unknown"
UNKNOWN_DIM_PREFIX = "empty_dim_param"


@dataclass(frozen=True)
class OutputSaving:
    index: int
    tensor: str
    elements: Polynomial
    bytes_per_element: int
    save_ratio: float

    @cached_property
    def bytes(self) -> Polynomial:
        # ORT prints the ratio with std::to_string (6 decimals) before sympy reads it.
        return self.elements.scale(self.bytes_per_element).scale(Fraction(f"{self.save_ratio:.6f}"))


@dataclass(frozen=True)
class NodePlanSaving:
    plan: NodePlan
    outputs: tuple[OutputSaving, ...]
    warnings: tuple[str, ...]
    module: str | None = None  # the torch module the entry node came from

    @cached_property
    def exact(self) -> Polynomial:
        total = Polynomial()
        for output in self.outputs:
            total = total + output.bytes
        return total

    @property
    def ort_choices(self) -> tuple[Polynomial, ...]:
        """The figures ORT may print for this node, one per candidate output (hash order decides)."""
        return tuple(output.bytes for output in self.outputs)

    @property
    def ort(self) -> Polynomial:
        """ORT's figure if its hash order listed outputs by index (the last one counts)."""
        return self.outputs[-1].bytes if self.outputs else Polynomial()


class UnknownDims:
    """ORT names dims it knows nothing about ``empty_dim_param<k>`` from a process-wide
    counter that starts at 0 (and also advances when ORT merely checks a shape for unknown
    dims): which number a dim gets is ORT's call order, so compare such names as placeholders."""

    def __init__(self) -> None:
        self.count = 0

    def name(self) -> str:
        self.count += 1
        return f"{UNKNOWN_DIM_PREFIX}{self.count - 1}"


def plan_saving(graph: TrainingGraph, plan: NodePlan, unknown_dims: UnknownDims | None = None) -> NodePlanSaving:
    unknown_dims = unknown_dims or UnknownDims()
    outputs, warnings = [], []
    for index in plan.stashed_outputs:
        tensor = plan.entry.outputs[index]
        info = graph.tensor(tensor)
        dims = _saving_dims(graph, plan, index)
        size = element_size(info.elem_type)
        if size is None:
            warnings.append(f"{plan.entry.name}: element type of {tensor} unknown; its saving is counted as 0")
            size = 0
        if dims is None:
            warnings.append(
                f"{plan.entry.name}: shape of {tensor} unknown; its saving is symbolic in '{UNKNOWN_SHAPE_SYMBOL}'"
            )
        outputs.append(OutputSaving(index, tensor, _elements(dims, unknown_dims), size, plan.save_ratio))
    return NodePlanSaving(plan, tuple(outputs), tuple(warnings), _module(graph, plan))


def stashed_bytes(
    graph: TrainingGraph, candidates: Mapping[int, tuple[int, ...]], unknown_dims: UnknownDims
) -> Polynomial:
    """Bytes of all stashed activations (every candidate output), as if nothing were recomputed."""
    total = Polynomial()
    for order, indices in candidates.items():
        for index in indices:
            info = graph.tensor(graph.nodes[order].outputs[index])
            total = total + _elements(info.dims, unknown_dims).scale(element_size(info.elem_type) or 0)
    return total


def _elements(dims: Sequence[Dim] | None, unknown_dims: UnknownDims) -> Polynomial:
    if dims is None:
        return Polynomial.symbol(UNKNOWN_SHAPE_SYMBOL)
    return Polynomial.product_of(d if d is not None else unknown_dims.name() for d in dims)


def _module(graph: TrainingGraph, plan: NodePlan) -> str | None:
    """The entry's module scope; fused nodes (``Gelu_token_0``) lost theirs, so their input's."""
    for node in (plan.entry, *reversed(plan.nodes)):
        if module := module_path(node.name):
            return module
    for name in plan.nodes[0].inputs:
        if name in graph.producer and (module := module_path(graph.nodes[graph.producer[name][0]].name)):
            return module
    return None


def _saving_dims(graph: TrainingGraph, plan: NodePlan, index: int) -> tuple[Dim, ...] | None:
    dims = graph.tensor(plan.entry.outputs[index]).dims
    if plan.entry.op_type == "Reshape" and dims is not None and None in dims:
        # ORT measures a Reshape whose output shape has an unnamed dim by its input instead.
        source = graph.tensor(plan.entry.inputs[0]).dims
        if source is not None and None not in source:
            return source
    return dims
