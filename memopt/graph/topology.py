"""The node orders ORT's memory optimizer walks, rebuilt from a saved training graph.

A saved execution graph lists its nodes in ORT's default topological order (a reverse DFS
from the graph's leaves over the session's node indices). From 1.18 the memory optimizer
walks ORT's training-specific "memory efficient" topological sort instead
(``Graph::MemoryEfficientTopologicalSort``): the forward nodes are the YieldOp's ancestors
(and the Shape/Size nodes of those), then the YieldOp, then every other node. A backward
node that needs only forward tensors (the weight gradient's Reshape of the last hidden
state) can come before the YieldOp in the file but is backward to the analysis, so the
tensor it reads counts as stashed.

1.18 keeps the forward nodes in the file's order (checked against 1.18.0's VERBOSE search
log). 1.19 orders them by a reverse DFS from the YieldOp's producers that visits, among a
node's producers, the one farthest from the graph's sources first, so that a long chain
(the attention scores) comes before a short side branch (the mask built from the inputs)
that joins it; Shape and Size nodes follow their producer. The subgraph strings of ORT's
Plan table list nodes in this order. ORT breaks ties between producers at the same distance
by node index, which the saved file does not record; the file position stands in for it
(the earlier node first), which reproduced every plan's node order in 1.19.2's VERBOSE
search log on tiny GPT-2, Llama, Qwen2, T5 and BERT.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from memopt.graph.training_graph import TrainingGraph

__all__ = ["memory_efficient_order"]

_SHAPE_OPS = ("Shape", "Size")


def memory_efficient_order(graph: TrainingGraph, *, deepest_first: bool) -> list[int]:
    """Node orders (file positions) in ORT's memory-efficient order, the YieldOp right after
    the forward nodes; those in file order, or (``deepest_first``, 1.19) in 1.19's DFS order.
    A graph without a YieldOp keeps its file order."""
    yield_op = next((node.order for node in graph.nodes if node.op_type == "YieldOp"), None)
    if yield_op is None:
        return [node.order for node in graph.nodes]
    producers = [_producers(graph, node.order) for node in graph.nodes]
    forward = _reverse_dfs(producers[yield_op], producers, _longest_distance(graph, producers))
    _place_shape_nodes(graph, producers, forward)
    if not deepest_first:
        forward.sort()
    seen = {*forward, yield_op}
    return [*forward, yield_op, *(node.order for node in graph.nodes if node.order not in seen)]


def _producers(graph: TrainingGraph, order: int) -> list[int]:
    """The node's input edges' producers, one per edge, as ORT's edge set sorts them."""
    return [producer for producer, _, _ in graph.input_edges(graph.nodes[order])]


def _longest_distance(graph: TrainingGraph, producers: Sequence[Sequence[int]]) -> list[int]:
    """Each node's longest path (in edges) from a node without input edges (Kahn's algorithm)."""
    consumers: list[list[int]] = [[] for _ in graph.nodes]
    waiting = [len(inputs) for inputs in producers]
    for order, inputs in enumerate(producers):
        for producer in inputs:
            consumers[producer].append(order)
    distance = [0] * len(graph.nodes)
    ready = deque(order for order, count in enumerate(waiting) if count == 0)
    while ready:
        current = ready.popleft()
        for consumer in consumers[current]:
            distance[consumer] = max(distance[consumer], distance[current] + 1)
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                ready.append(consumer)
    return distance


def _reverse_dfs(start: Sequence[int], producers: Sequence[Sequence[int]], distance: Sequence[int]) -> list[int]:
    """Post-order DFS over producers from ``start`` (its last node first): of a node's
    producers, the farthest from the sources is visited first, then the earlier in the file."""
    stack = [(order, False) for order in start]
    visited: set[int] = set()
    found: list[int] = []
    while stack:
        order, leaving = stack.pop()
        if leaving:
            found.append(order)
            continue
        if order in visited:
            continue
        visited.add(order)
        stack.append((order, True))
        stack.extend((p, False) for p in sorted(producers[order], key=lambda p: (distance[p], -p)))
    return found


def _place_shape_nodes(graph: TrainingGraph, producers: Sequence[Sequence[int]], forward: list[int]) -> None:
    """Shape and Size nodes of a forward node go right after it (ORT frees the input earlier)."""
    inside = set(forward)
    for node in graph.nodes:
        if node.op_type not in _SHAPE_OPS or not producers[node.order] or node.order in inside:
            continue
        parent = producers[node.order][0]
        if parent in inside:
            forward.insert(forward.index(parent) + 1, node.order)
            inside.add(node.order)
