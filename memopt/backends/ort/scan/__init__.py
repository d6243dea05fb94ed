"""``memopt scan``: ORT's recompute plans found from the training graph alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memopt.backends.ort.graph.topology import memory_efficient_order, priority_order
from memopt.backends.ort.graph.training_graph import TensorInfo, TrainingGraph
from memopt.backends.ort.rules import AnalysisOrder, ProbeLevel, rules_for
from memopt.backends.ort.scan.buffers import combinations
from memopt.backends.ort.scan.detect import Analysis, ScanError, analyse
from memopt.backends.ort.scan.modules import fold_layers
from memopt.backends.ort.scan.patterns import Pattern, group_patterns
from memopt.backends.ort.scan.savings import UnknownDims, plan_saving, stashed_bytes
from memopt.backends.ort.version import OrtVersion
from memopt.graph.polynomial import Polynomial

__all__ = ["ESTIMATED_ORDER_WARNING", "ProbeLevel", "ScanError", "ScanReport", "fold_layers", "scan_graph"]


# ORT 1.17 breaks ties in its node order by its session's node indices, which only the graph
# ORTModule handed its session records.
ESTIMATED_ORDER_WARNING = (
    "ORT's node indices are not known (no *_optimized_training.onnx beside the graph): the node order inside "
    "a subgraph name is estimated and may differ from ORT's; for the exact order, keep ORTModule's "
    "<prefix>_optimized_training.onnx of the same run beside <prefix>_execution_model_training.onnx "
    "(DebugOptions(save_onnx=True) saves both)"
)


@dataclass(frozen=True)
class ScanReport:
    family: str
    layer_boundary: bool
    patterns: tuple[Pattern, ...]
    inputs: Mapping[str, TensorInfo]  # the model's inputs (weights excluded), dims named where dynamic
    stashed: Polynomial  # bytes of every activation kept from forward for backward, no recompute
    analysis: Analysis  # node orders in ``graph``
    graph: TrainingGraph  # the graph as analysed: nodes in the order the release walks
    warnings: tuple[str, ...]

    @property
    def symbols(self) -> frozenset[str]:
        found = {s for p in self.patterns for s in p.exact.symbols | p.ort.symbols} | set(self.stashed.symbols)
        found |= {d for info in self.inputs.values() for d in info.dims or () if isinstance(d, str)}
        return frozenset(found)


def scan_graph(
    graph: TrainingGraph,
    ort_version: OrtVersion | str,
    *,
    level: ProbeLevel = ProbeLevel.ADVANCED,
    layer_boundary: bool = False,
    dims: Mapping[str, int] | None = None,
) -> ScanReport:
    """Analyse ``graph`` with the rules of ``ort_version``; order patterns by saving at ``dims``."""
    rules = rules_for(ort_version)
    estimated_order = rules.analysis_order is AnalysisOrder.PRIORITY_BASED and graph.session_indices is None
    graph = _in_analysis_order(graph, rules.analysis_order)
    analysis = analyse(graph, rules, level, layer_boundary)
    unknown_dims = UnknownDims()
    savings = [plan_saving(graph, plan, unknown_dims) for plan in analysis.plans]
    warnings = [*analysis.warnings, *(w for s in savings for w in s.warnings)]
    if estimated_order and analysis.plans:
        warnings.append(ESTIMATED_ORDER_WARNING)
    inputs = {
        name: graph.tensor(name)
        for name in graph.graph_inputs
        if any(isinstance(d, str) for d in graph.tensor(name).dims or ())
    }
    stashed = stashed_bytes(graph, analysis.candidates, unknown_dims)
    shared = combinations(graph, analysis.plans) if rules.combines_shared_buffers else None
    patterns = group_patterns(savings, dims, compromise_type=2 if rules.has_compromise_type else 1, combinations=shared)
    return ScanReport(rules.family, layer_boundary, patterns, inputs, stashed, analysis, graph, tuple(warnings))


def _in_analysis_order(graph: TrainingGraph, order: AnalysisOrder) -> TrainingGraph:
    if order is AnalysisOrder.PRIORITY_BASED:
        return graph.renumbered(priority_order(graph))
    if order is AnalysisOrder.FILE:
        return graph
    deepest_first = order is AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST
    return graph.renumbered(memory_efficient_order(graph, deepest_first=deepest_first))
