"""Node plans grouped into ORT's Plan-table rows ("patterns"), with where each occurs.

A row's key is ``<subgraph>:<type>:-1``; its frequency counts the entry nodes with that
plan. A node with both a recompute and a compromise plan counts in both rows (they are
alternatives: ORT applies one per node), as ORT's IterateNode does. ORT joins keys with
commas only for plans tied by buffer reuse in its execution plan, which the graph alone
does not show.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memopt.graph.polynomial import Polynomial
from memopt.scan.detect import PlanKind
from memopt.scan.savings import PlanSaving

__all__ = ["Occurrence", "Pattern", "group_patterns", "order_patterns"]


@dataclass(frozen=True)
class Occurrence:
    entry: str  # the entry node's name
    module: str | None  # e.g. "blocks.3.mlp", from the node name's scope
    nodes: tuple[str, ...]
    exact: Polynomial
    ort_choices: tuple[Polynomial, ...]
    elements: Polynomial  # elements of the stashed outputs (what ORT <= 1.16 reports, by shape)


@dataclass(frozen=True)
class Pattern:
    key: str  # the Plan-table "Configs" cell, e.g. "FusedMatMul+Add+:1:-1"
    subgraph: str
    kind: PlanKind
    frequency: int
    exact: Polynomial
    ort: Polynomial
    occurrences: tuple[Occurrence, ...]

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.module for o in self.occurrences if o.module))

    @property
    def elements(self) -> Polynomial:
        return sum((o.elements for o in self.occurrences), Polynomial())

    def ort_matches(self, printed: Polynomial, dims: Mapping[str, int] | None = None) -> bool:
        """Whether ORT could have printed ``printed``: one candidate output's saving per node.

        With ``dims``, compare values there instead of expressions: ORT may name the same
        axis differently in another run (``input_ids_dim0`` or ``attention_mask_dim0``).
        """
        reachable = {Polynomial()}
        for occurrence in self.occurrences:
            choices = occurrence.ort_choices or (Polynomial(),)
            reachable = {total + choice for total in reachable for choice in set(choices)}
            if len(reachable) > 4096:
                break  # every realistic graph stays far below; beyond, fall back to the exact check
        candidates = reachable | {self.exact}
        if dims is None:
            return printed in candidates
        value = printed.evaluate(dims)
        return any(abs(c.evaluate(dims) - value) <= 1e-9 * max(1.0, abs(value)) for c in candidates)


def group_patterns(
    savings: Iterable[PlanSaving], dims: Mapping[str, int] | None = None, compromise_type: int = PlanKind.COMPROMISE
) -> tuple[Pattern, ...]:
    """Patterns in Plan-table order: by saving at ``dims`` (ORT's figure) descending, then key.

    ``compromise_type``: the config type that enables a compromise plan (1 on <= 1.16,
    where compromise plans live in their own store but are enabled as type 1).
    """
    rows: dict[tuple[str, PlanKind], list[PlanSaving]] = {}
    for saving in savings:
        config_type = compromise_type if saving.plan.kind is PlanKind.COMPROMISE else int(saving.plan.kind)
        rows.setdefault((f"{saving.plan.subgraph}:{config_type}:-1", saving.plan.kind), []).append(saving)
    return order_patterns([_pattern(key, members) for (key, _), members in rows.items()], dims)


def order_patterns(patterns: Iterable[Pattern], dims: Mapping[str, int] | None) -> tuple[Pattern, ...]:
    """ORT's Plan-table order: by ORT's saving figure at ``dims``, largest first, ties by key."""
    ordered = sorted(patterns, key=lambda p: p.key)
    if dims is not None:
        ordered.sort(key=lambda p: _evaluate_or_zero(p.ort, dims), reverse=True)
    return tuple(ordered)


def _pattern(key: str, members: list[PlanSaving]) -> Pattern:
    occurrences, exact, ort = [], Polynomial(), Polynomial()
    for saving in members:
        entry = saving.plan.entry
        nodes = tuple(node.name for node in saving.plan.nodes)
        elements = sum((output.elements for output in saving.outputs), Polynomial())
        occurrences.append(Occurrence(entry.name, saving.module, nodes, saving.exact, saving.ort_choices, elements))
        exact, ort = exact + saving.exact, ort + saving.ort
    first = members[0].plan
    return Pattern(key, first.subgraph, first.kind, len(members), exact, ort, tuple(occurrences))


def _evaluate_or_zero(polynomial: Polynomial, dims: Mapping[str, int]) -> float:
    return polynomial.evaluate(dims) if polynomial.symbols <= set(dims) else 0.0
