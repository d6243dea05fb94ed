"""Node plans grouped into ORT's Plan-table rows ("patterns"), with where each occurs.

A row's key is ``<subgraph>:<type>:-1``; its frequency counts the entry nodes with that
plan. A node with both a recompute and a compromise plan counts in both rows (they are
alternatives: ORT applies one per node), as ORT's IterateNode does. Plans tied by a shared
buffer form one row occurrence together, their keys joined by commas in sorted order
(:mod:`memopt.backends.ort.scan.buffers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memopt.backends.ort.config import OptimizationType, PlanKey, plan_key
from memopt.backends.ort.scan.buffers import Combination
from memopt.backends.ort.scan.savings import NodePlanSaving
from memopt.graph.polynomial import Polynomial

__all__ = ["Occurrence", "Pattern", "group_patterns", "order_patterns"]

# One row occurrence: its plans' savings, and the (entry order, output index) pairs that
# share another member's buffer and so save nothing.
_Members = tuple[tuple[NodePlanSaving, ...], frozenset[tuple[int, int]]]


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
    key: PlanKey  # the Plan-table "Configs" cell, e.g. "FusedMatMul+Add+:1:-1"
    subgraph: str
    kind: OptimizationType
    frequency: int
    exact: Polynomial
    ort: Polynomial
    occurrences: tuple[Occurrence, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PlanKey(self.key))  # a key read back from text is a PlanKey again

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
    savings: Iterable[NodePlanSaving],
    dims: Mapping[str, int] | None = None,
    compromise_type: int = OptimizationType.COMPROMISE,
    combinations: Iterable[Combination] | None = None,
) -> tuple[Pattern, ...]:
    """Patterns in Plan-table order: by saving at ``dims`` (ORT's figure) descending, then key.

    ``compromise_type``: the config type that enables a compromise plan (1 on <= 1.16,
    where compromise plans live in their own store but are enabled as type 1).
    ``combinations``: the rows' occurrences where plans share buffers (see
    :mod:`memopt.backends.ort.scan.buffers`); by default each plan is its own occurrence.
    """
    by_plan = {id(saving.plan): saving for saving in savings}
    if combinations is None:
        combinations = [Combination((saving.plan,)) for saving in by_plan.values()]
    rows: dict[tuple[str, OptimizationType], list[_Members]] = {}
    for combination in combinations:
        members = tuple(by_plan[id(plan)] for plan in combination.plans)
        keys = sorted(_config_key(saving, compromise_type) for saving in members)
        rows.setdefault((",".join(keys), members[0].plan.kind), []).append((members, combination.shared))
    return order_patterns([_pattern(PlanKey(key), occurrences) for (key, _), occurrences in rows.items()], dims)


def _config_key(saving: NodePlanSaving, compromise_type: int) -> str:
    config_type = compromise_type if saving.plan.kind is OptimizationType.COMPROMISE else int(saving.plan.kind)
    return plan_key(saving.plan.subgraph, OptimizationType(config_type))


def order_patterns(patterns: Iterable[Pattern], dims: Mapping[str, int] | None) -> tuple[Pattern, ...]:
    """ORT's Plan-table order: by ORT's saving figure at ``dims``, largest first, ties by key."""
    ordered = sorted(patterns, key=lambda p: p.key)
    if dims is not None:
        ordered.sort(key=lambda p: _evaluate_or_zero(p.ort, dims), reverse=True)
    return tuple(ordered)


def _pattern(key: PlanKey, members: list[_Members]) -> Pattern:
    occurrences, exact, ort = [], Polynomial(), Polynomial()
    for savings, shared in members:
        occurrence = _occurrence(savings, shared)
        occurrences.append(occurrence)
        exact = exact + occurrence.exact
        ort = ort + occurrence.ort_choices[-1] if occurrence.ort_choices else ort
    first = members[0][0]
    subgraph = key.subgraphs if len(first) > 1 else first[0].plan.subgraph
    return Pattern(key, subgraph, first[0].plan.kind, len(members), exact, ort, tuple(occurrences))


def _occurrence(savings: tuple[NodePlanSaving, ...], shared: frozenset[tuple[int, int]]) -> Occurrence:
    """One row occurrence: a plan, or a plan with the plans of the nodes whose buffers it shares."""
    exact, elements = Polynomial(), Polynomial()
    choices: set[Polynomial] = {Polynomial()}
    for saving in savings:
        entry = saving.plan.entry.order
        kept = [output for output in saving.outputs if (entry, output.index) not in shared]
        exact = sum((output.bytes for output in kept), exact)
        elements = sum((output.elements for output in saving.outputs), elements)
        # ORT prints one output's figure per plan (hash order); a shared output prints 0.
        own = {output.bytes if (entry, output.index) not in shared else Polynomial() for output in saving.outputs}
        choices = {total + choice for total in choices for choice in own or {Polynomial()}}
    first = savings[0]
    nodes = tuple(dict.fromkeys(node.name for saving in savings for node in saving.plan.nodes))
    ort_choices = tuple(sorted(choices, key=str)) if len(savings) > 1 or shared else first.ort_choices
    return Occurrence(first.plan.entry.name, first.module, nodes, exact, ort_choices, elements)


def _evaluate_or_zero(polynomial: Polynomial, dims: Mapping[str, int]) -> float:
    return polynomial.evaluate(dims) if polynomial.symbols <= set(dims) else 0.0
