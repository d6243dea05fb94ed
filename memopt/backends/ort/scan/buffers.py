"""Stashed outputs that share another node's buffer, and the Plan-table rows ORT makes of them.

ORT (1.19) reads its execution plan before it prints the Plan table: a plan whose stashed
output reuses a buffer made by a node outside its subgraph is listed only *combined* with
each plan of that node (one row per combination, the configs joined by commas, sorted),
and the shared output saves nothing there; when that node has no plan, the plan is not
listed at all. Buffers are shared by kernels that alias their input (a Reshape's output is
its input's buffer); the execution plan of an ORTModule session reuses no freed buffers
(``enable_mem_reuse`` is off), so aliases are what the graph has to show. An alias of a
graph input, or of a buffer the plan recomputes itself, leaves the plan on its own row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memopt.backends.ort.graph.training_graph import TrainingGraph
from memopt.backends.ort.scan.detect import NodePlan

__all__ = ["ALIAS_OPS", "Combination", "buffer_owners", "combinations"]

# CPU kernels declaring Alias(0, 0): output 0 is input 0's buffer.
ALIAS_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "ExpandDims"})


@dataclass(frozen=True)
class Combination:
    """Plans ORT lists as one Plan-table row occurrence; ``shared`` outputs count as 0 bytes."""

    plans: tuple[NodePlan, ...]
    shared: frozenset[tuple[int, int]] = field(default_factory=frozenset)  # (entry order, output index)


def buffer_owners(graph: TrainingGraph, plan: NodePlan) -> dict[int, int]:
    """Stashed output index -> order of the node outside ``plan`` whose buffer it is."""
    inside = {node.order for node in plan.nodes}
    owners = {}
    for index in plan.stashed_outputs:
        node, output = plan.entry, index
        while node.op_type in ALIAS_OPS and output == 0 and node.inputs and node.inputs[0] in graph.producer:
            order, output = graph.producer[node.inputs[0]]
            node = graph.nodes[order]
        if node is plan.entry or node.order in inside:
            continue  # its own buffer, or one the plan recomputes anyway
        owners[index] = node.order
    return owners


def combinations(graph: TrainingGraph, plans: Sequence[NodePlan]) -> list[Combination]:
    """The row occurrences ORT's Plan table counts, in the order of ``plans``."""
    by_node: dict[int, list[NodePlan]] = {}
    for plan in plans:
        by_node.setdefault(plan.entry.order, []).append(plan)
    owners = {id(plan): buffer_owners(graph, plan) for plan in plans}
    found: dict[tuple[int, ...], Combination] = {}  # by its plans' identities, first found first
    for plan in plans:
        for combination in _expand(plan, by_node, owners, ()):
            found.setdefault(tuple(id(member) for member in combination.plans), combination)
    return list(found.values())


def _expand(
    plan: NodePlan,
    by_node: Mapping[int, list[NodePlan]],
    owners: Mapping[int, Mapping[int, int]],
    seen: tuple[int, ...],
) -> list[Combination]:
    """Every combination starting with ``plan``: one plan of each buffer owner, recursively."""
    shared = owners[id(plan)]
    if not shared:
        return [Combination((plan,))]
    result = [Combination((plan,), frozenset((plan.entry.order, index) for index in shared))]
    for owner in dict.fromkeys(shared.values()):
        options = [
            combination
            for owner_plan in by_node.get(owner, [])
            if id(owner_plan) not in seen
            for combination in _expand(owner_plan, by_node, owners, (*seen, id(plan)))
        ]
        result = [
            Combination((*partial.plans, *option.plans), partial.shared | option.shared)
            for partial in result
            for option in options
        ]
    return result
