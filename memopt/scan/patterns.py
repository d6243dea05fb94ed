"""Node plans grouped into ORT's Plan-table rows ("patterns"), with where each occurs.

A row's key is the comma-joined, sorted ``<subgraph>:<type>:-1`` of every plan its
entry node has (normally one); its frequency counts entry nodes (doc §3.7).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memopt.polynomial import Polynomial
from memopt.scan.savings import PlanSaving

__all__ = ["Occurrence", "Pattern", "group_patterns", "module_path"]


@dataclass(frozen=True)
class Occurrence:
    entry: str  # the entry node's name
    module: str | None  # e.g. "blocks.3.mlp", from the node name's scope
    nodes: tuple[str, ...]
    exact: Polynomial
    ort_choices: tuple[Polynomial, ...]


@dataclass(frozen=True)
class Pattern:
    key: str  # the Plan-table "Configs" cell, e.g. "FusedMatMul+Add+:1:-1"
    entries: tuple[str, ...]  # its "<subgraph>:<type>" parts
    frequency: int
    exact: Polynomial
    ort: Polynomial
    occurrences: tuple[Occurrence, ...]

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.module for o in self.occurrences if o.module))

    def ort_matches(self, printed: Polynomial) -> bool:
        """Whether ORT could have printed ``printed``: one candidate output's saving per node."""
        reachable = {Polynomial()}
        for occurrence in self.occurrences:
            choices = occurrence.ort_choices or (Polynomial(),)
            reachable = {total + choice for total in reachable for choice in set(choices)}
            if len(reachable) > 4096:
                break  # every realistic graph stays far below; beyond, fall back to the exact check
        return printed in reachable or printed == self.exact


def group_patterns(savings: Iterable[PlanSaving], dims: Mapping[str, int] | None = None) -> tuple[Pattern, ...]:
    """Patterns in Plan-table order: by saving at ``dims`` (ORT's figure) descending, then key."""
    by_entry: dict[str, list[PlanSaving]] = {}
    for saving in savings:
        by_entry.setdefault(saving.plan.entry.name, []).append(saving)
    rows: dict[str, list[list[PlanSaving]]] = {}
    for node_savings in by_entry.values():
        key = ",".join(sorted(f"{s.plan.subgraph}:{int(s.plan.kind)}:-1" for s in node_savings))
        rows.setdefault(key, []).append(node_savings)
    patterns = [_pattern(key, nodes) for key, nodes in rows.items()]
    patterns.sort(key=lambda p: p.key)
    if dims is not None:
        patterns.sort(key=lambda p: _evaluate_or_zero(p.ort, dims), reverse=True)
    return tuple(patterns)


def _pattern(key: str, nodes: list[list[PlanSaving]]) -> Pattern:
    occurrences, exact, ort = [], Polynomial(), Polynomial()
    for node_savings in nodes:
        node_exact, node_ort, choices = Polynomial(), Polynomial(), [Polynomial()]
        for saving in node_savings:
            node_exact = node_exact + saving.exact
            node_ort = node_ort + saving.ort
            choices = [c + option for c in choices for option in (saving.ort_choices or (Polynomial(),))]
        entry = node_savings[0].plan.entry
        members = {n.name: None for s in node_savings for n in s.plan.nodes}
        occurrences.append(Occurrence(entry.name, module_path(entry.name), tuple(members), node_exact, tuple(choices)))
        exact, ort = exact + node_exact, ort + node_ort
    entries = tuple(part.rsplit(":", 1)[0] for part in key.split(","))
    return Pattern(key, entries, len(nodes), exact, ort, tuple(occurrences))


def _evaluate_or_zero(polynomial: Polynomial, dims: Mapping[str, int]) -> float:
    return polynomial.evaluate(dims) if polynomial.symbols <= set(dims) else 0.0


def module_path(node_name: str) -> str | None:
    """The torch module a node came from, read off the exporter's scope in its name.

    ``/_original_module/blocks.3/mlp/fc/MatMul/MatmulTransposeFusion/`` -> ``blocks.3.mlp.fc``.
    Scope segments are module attribute names; the first capitalised segment is an op.
    """
    parts = [p for p in node_name.split("/") if p]
    if parts and parts[0] == "_original_module":
        parts = parts[1:]
    scope = []
    for part in parts:
        if part[:1].isupper():
            break
        scope.append(part)
    return ".".join(scope) or None
