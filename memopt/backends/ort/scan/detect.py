"""ORT's recompute analysis, reimplemented: which stashed activations could be recomputed.

Follows MemoryOptimizer's FindORTModuleMemoryOpportunity / SelectRecomputeSubgraph
and its transformer-layer boundary rules: split at the YieldOp, find stashed
activations, and from each entry node search bottom-up, level by level, for a subgraph
that can be rerun in the backward pass from tensors that are stashed anyway.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from onnx import TensorProto
from onnx.helper import tensor_dtype_to_np_dtype

from memopt.backends.ort.config import OptimizationType
from memopt.backends.ort.graph.training_graph import Node, TrainingGraph, element_count_dims
from memopt.backends.ort.rules import (
    SMALL_STATIC_LIMIT,
    ProbeLevel,
    ReleaseRules,
    StaticEdgeFilter,
)
from memopt.errors import MemoptError

__all__ = ["Analysis", "NodePlan", "ScanError", "analyse", "element_size"]

_LAYER_NORMS = frozenset(
    {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}
)
_LAYER_NORMS_1_17 = frozenset({"LayerNormalization", "SkipLayerNormalization"})


class ScanError(MemoptError):
    """The graph cannot be analysed at all."""


@dataclass(frozen=True)
class NodePlan:
    """One way to stop stashing ``entry``'s candidate outputs: rerun ``nodes`` in backward."""

    entry: Node
    kind: OptimizationType
    nodes: tuple[Node, ...]  # topological order; the entry node last
    stashed_outputs: tuple[int, ...]
    save_ratio: float

    @property
    def subgraph(self) -> str:
        return "".join(f"{node.op_type}+" for node in self.nodes)


@dataclass(frozen=True)
class Analysis:
    plans: tuple[NodePlan, ...]  # in ORT's discovery order: entry nodes in reverse topological order
    candidates: dict[int, tuple[int, ...]]  # node order -> stashed output indices
    yield_order: int | None
    boundary_layer_norms: tuple[int, ...]
    warnings: tuple[str, ...]


def analyse(
    graph: TrainingGraph,
    rules: ReleaseRules,
    level: ProbeLevel = ProbeLevel.ADVANCED,
    layer_boundary: bool = False,
) -> Analysis:
    """Every recompute (and compromise) plan ORT's analysis would find in ``graph``.

    ``layer_boundary`` is the probe ORTModule uses for ORTMODULE_MEMORY_OPT_LEVEL=1/2.
    """
    yield_order = _find_yield(graph)
    if yield_order is None:
        return Analysis((), {}, None, (), ("no YieldOp: not an ORTModule training graph, nothing to recompute",))
    usage = _forward_output_usage(graph, yield_order)
    candidates = _stashed_candidates(graph, usage, rules)
    boundaries: tuple[int, ...] = ()
    if layer_boundary and rules.has_layer_boundary:
        boundaries = _boundary_layer_norms(graph, yield_order, rules)
    search = _Search(graph, rules, level, usage)
    plans: list[NodePlan] = []
    for order in sorted(candidates, reverse=True):
        node = graph.nodes[order]
        if not rules.is_recomputable(node, level):
            continue
        if boundaries and _feeds_boundary(graph, node, candidates[order], boundaries):
            continue
        recompute, can_compromise = search.select(node, candidates[order], compromise=False)
        if recompute is not None:
            plans.append(recompute)
        if can_compromise:
            compromise, _ = search.select(node, candidates[order], compromise=True)
            if compromise is not None:
                plans.append(compromise)
    return Analysis(tuple(plans), candidates, yield_order, boundaries, ())


def element_size(elem_type: int | None) -> int | None:
    if not elem_type or elem_type == TensorProto.STRING:
        return None
    try:
        return tensor_dtype_to_np_dtype(elem_type).itemsize
    except (KeyError, TypeError):
        return None


def _find_yield(graph: TrainingGraph) -> int | None:
    found = None
    for node in graph.nodes:
        if node.op_type == "YieldOp":
            if found is not None:
                raise ScanError(f"There are multiple YieldOps in the graph, node: {node.name} is the second one.")
            found = node.order
    return found


def _forward_output_usage(graph: TrainingGraph, yield_order: int) -> dict[str, tuple[bool, bool]]:
    """For each output of a forward node: (used by a forward node, used by a backward node)."""
    usage = {}
    for node in graph.nodes[: yield_order + 1]:
        for name in node.outputs:
            if not name:
                continue
            consumers = graph.consumers.get(name, [])
            usage[name] = (any(c <= yield_order for c in consumers), any(c > yield_order for c in consumers))
    return usage


def _stashed_candidates(
    graph: TrainingGraph, usage: dict[str, tuple[bool, bool]], rules: ReleaseRules
) -> dict[int, tuple[int, ...]]:
    candidates: dict[int, list[int]] = {}
    for name, (in_forward, in_backward) in usage.items():
        if graph.tensor(name).elem_type is None:
            # ORT has no plan for an output whose type the graph does not record (seen: an
            # untyped int64 Unsqueeze output ORT 1.19.2 left out while memopt listed it).
            continue
        if in_backward and (in_forward or not rules.stashed_needs_forward_use):
            order, index = graph.producer[name]
            candidates.setdefault(order, []).append(index)
    return {order: tuple(sorted(indices)) for order, indices in candidates.items()}


class _Search:
    def __init__(
        self, graph: TrainingGraph, rules: ReleaseRules, level: ProbeLevel, usage: dict[str, tuple[bool, bool]]
    ) -> None:
        self.graph, self.rules, self.level, self.usage = graph, rules, level, usage

    def select(self, entry: Node, outputs: tuple[int, ...], compromise: bool) -> tuple[NodePlan | None, bool]:
        """SelectRecomputeSubgraph: the plan (None on failure) and whether a compromise exists."""
        queue = deque((entry.order, index) for index in outputs)
        visited_ports: set[tuple[int, int]] = set()
        visited_nodes: set[int] = set()
        selected: list[int] = []
        early_stop = can_compromise = False
        save_ratio = 1.0
        first_level = True
        while len(selected) < self.rules.max_subgraph_nodes and queue and not early_stop:
            for _ in range(len(queue)):
                port = queue.popleft()
                if port in visited_ports:
                    continue
                visited_ports.add(port)
                order, output_index = port
                if order in visited_nodes:
                    continue
                visited_nodes.add(order)
                node = self.graph.nodes[order]
                followed = self.rules.followed_inputs(node, self.level)
                if first_level:
                    if followed is None:
                        early_stop = True
                        break
                else:
                    used_in_backward = self._used_in_backward(node, output_index)
                    if followed is None and not used_in_backward:
                        early_stop = True
                        break
                    if used_in_backward:
                        continue  # stashed anyway: the subgraph reads it instead of recomputing it
                if order not in selected:
                    selected.append(order)
                ratio = self._size_ratio(node)
                if ratio < 1.0:
                    can_compromise = True
                    if compromise:
                        save_ratio = 1.0 - ratio
                        continue
                assert followed is not None  # a None above either stopped or continued
                queue.extend(self._next_ports(node, followed))
            first_level = False
        if queue or early_stop or not selected:
            return None, can_compromise
        nodes = tuple(self.graph.nodes[o] for o in sorted(selected))
        kind = OptimizationType.COMPROMISE if compromise else OptimizationType.RECOMPUTE
        return NodePlan(entry, kind, nodes, outputs, save_ratio), can_compromise

    def _used_in_backward(self, node: Node, output_index: int) -> bool:
        if self.rules.backward_use_by_node:
            return any(self.usage[name][1] for name in node.outputs if name)
        return self.usage[node.outputs[output_index]][1]

    def _next_ports(self, node: Node, followed: frozenset[int]) -> list[tuple[int, int]]:
        ports = []
        for producer_order, output_index, input_index in self.graph.input_edges(node):
            if input_index not in followed:
                continue
            if self._skips_static(self.graph.nodes[producer_order].outputs[output_index]):
                continue
            ports.append((producer_order, output_index))
        return ports

    def _skips_static(self, tensor_name: str) -> bool:
        mode = self.rules.static_edge_filter
        if mode is StaticEdgeFilter.NONE:
            return False
        count = element_count_dims(self.graph.tensor(tensor_name).dims)
        if count is None:
            return False
        return mode is StaticEdgeFilter.ALL_STATIC or count < SMALL_STATIC_LIMIT

    def _size_ratio(self, node: Node) -> float:
        """Input/output element-size ratio: below 1 only for up-casting Casts."""
        if node.op_type != "Cast":
            return 1.0
        source = element_size(self.graph.tensor(node.inputs[0]).elem_type)
        target = element_size(self.graph.tensor(node.outputs[0]).elem_type)
        if source is None or target is None:
            return 1.0
        return source / target


def _boundary_layer_norms(graph: TrainingGraph, yield_order: int, rules: ReleaseRules) -> tuple[int, ...]:
    """The LayerNorms that open a transformer layer (ORT's FindLayerBoundaryLayerNormNodes)."""
    if rules.family == "1.17":
        return _boundary_layer_norms_1_17(graph, yield_order, rules)
    found = []
    for node in graph.nodes:
        if node.op_type not in _LAYER_NORMS or not node.inputs:
            continue
        consumers = graph.consumers.get(node.inputs[0], [])
        if len(consumers) < 2:
            continue
        adds = [c for c in consumers if graph.nodes[c].op_type == "Add"]
        norms = [c for c in consumers if graph.nodes[c].op_type in _LAYER_NORMS]
        if not adds or not norms:
            continue
        residual_add, other_norm = adds[-1], norms[-1]
        if residual_add >= yield_order or other_norm >= yield_order:
            continue
        limit = min(yield_order, residual_add)
        if _reaches_attention(graph, node, limit, rules):
            found.append(node.order)
    return tuple(found)


def _boundary_layer_norms_1_17(graph: TrainingGraph, yield_order: int, rules: ReleaseRules) -> tuple[int, ...]:
    """1.17's rule: a LayerNorm opens a layer when a breadth-first walk over its consumers
    meets attention before any other LayerNorm (so in a post-LN model, whose residual Add
    reaches the next LayerNorm first, none does). Matches 1.17.3's LEVEL=1 Plan tables."""
    return tuple(
        node.order
        for node in graph.nodes[:yield_order]
        if node.op_type in _LAYER_NORMS_1_17
        and _meets_attention(
            graph,
            _consumers_by_edge(graph, node),
            lambda current: _consumers_by_edge(graph, current),
            rules,
            stop=lambda current: current.op_type in _LAYER_NORMS_1_17,
        )
    )


def _consumers_by_edge(graph: TrainingGraph, node: Node) -> list[int]:
    """The node's consumers, one per edge (ORT's output node list), in analysis order."""
    return sorted(
        consumer
        for name in node.outputs
        if name
        for consumer in graph.consumers.get(name, [])
        for _ in range(graph.nodes[consumer].inputs.count(name))
    )


def _reaches_attention(graph: TrainingGraph, start: Node, limit: int, rules: ReleaseRules) -> bool:
    return _meets_attention(
        graph, _consumer_nodes(graph, start, limit), lambda node: _consumer_nodes(graph, node, limit), rules
    )


def _meets_attention(
    graph: TrainingGraph,
    start: Iterable[int],
    consumers: Callable[[Node], Iterable[int]],
    rules: ReleaseRules,
    stop: Callable[[Node], bool] = lambda node: False,
) -> bool:
    """Whether a breadth-first walk from ``start`` over ``consumers`` meets attention before
    a node ``stop`` ends the walk at."""
    queue = deque(start)
    seen: set[int] = set()
    while queue:
        order = queue.popleft()
        if order in seen:
            continue
        seen.add(order)
        node = graph.nodes[order]
        if rules.is_attention(node):
            return True
        if stop(node):
            return False
        queue.extend(consumers(node))
    return False


def _consumer_nodes(graph: TrainingGraph, node: Node, limit: int) -> list[int]:
    return sorted({c for name in node.outputs if name for c in graph.consumers.get(name, []) if c < limit})


def _feeds_boundary(graph: TrainingGraph, node: Node, outputs: tuple[int, ...], boundaries: tuple[int, ...]) -> bool:
    """Whether a stashed output is input 0 of a boundary LayerNorm (then ORT skips the node)."""
    for index in outputs:
        name = node.outputs[index]
        for consumer in graph.consumers.get(name, []):
            if consumer in boundaries and graph.nodes[consumer].inputs.index(name) == 0:
                return True
    return False
