"""``memopt scan``: ORT's recompute plans found from the training graph alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memopt.graph import Dim, TrainingGraph
from memopt.scan.detect import Analysis, ScanError, analyse
from memopt.scan.patterns import Pattern, group_patterns
from memopt.scan.rules import ProbeLevel, rules_for
from memopt.scan.savings import _UnknownDims, plan_saving

__all__ = ["ScanReport", "ScanError", "ProbeLevel", "scan_graph"]


@dataclass(frozen=True)
class ScanReport:
    family: str
    layer_boundary: bool
    patterns: tuple[Pattern, ...]
    input_dims: Mapping[str, tuple[Dim, ...]]  # graph input -> its dims (symbol names where dynamic)
    analysis: Analysis
    warnings: tuple[str, ...]

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for p in self.patterns for s in p.exact.symbols | p.ort.symbols)


def scan_graph(
    graph: TrainingGraph,
    ort_version: str,
    *,
    level: ProbeLevel = ProbeLevel.ADVANCED,
    layer_boundary: bool = False,
    dims: Mapping[str, int] | None = None,
) -> ScanReport:
    """Analyse ``graph`` with the rules of ``ort_version``; order patterns by saving at ``dims``."""
    rules = rules_for(ort_version)
    analysis = analyse(graph, rules, level, layer_boundary)
    unknown_dims = _UnknownDims()
    savings = [plan_saving(graph, plan, unknown_dims) for plan in analysis.plans]
    warnings = [*analysis.warnings, *(w for s in savings for w in s.warnings)]
    input_dims = {
        name: graph.tensor(name).dims or () for name in graph.graph_inputs if name not in graph.producer
        and any(isinstance(d, str) for d in graph.tensor(name).dims or ())
    }
    return ScanReport(rules.family, layer_boundary, group_patterns(savings, dims), input_dims, analysis, tuple(warnings))
