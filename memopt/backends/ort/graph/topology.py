"""The node orders ORT's memory optimizer walks, rebuilt from a saved training graph.

A saved execution graph lists its nodes in ORT's default topological order (a reverse DFS
from the graph's leaves over the session's node indices), the order releases up to 1.16
analyse. Later releases walk another order, and the node order of every subgraph string in
the Plan table, and which nodes count as forward (those before the YieldOp), follow it:

- 1.17: the priority-based order (``ExecutionOrder::PRIORITY_BASED``), Kahn's algorithm
  taking among ready nodes Shape/Size first, then nodes not marked ``__backwardpass``, then
  the lowest node index.
- 1.18 and 1.19: the training-specific memory-efficient order
  (``Graph::MemoryEfficientTopologicalSort``): the forward nodes are the YieldOp's ancestors
  (and the Shape/Size nodes of those), then the YieldOp, then every other node. A backward
  node that needs only forward tensors (the weight gradient's Reshape of the last hidden
  state) can come before the YieldOp in the file but is backward to the analysis, so the
  tensor it reads counts as stashed. 1.18 keeps the forward nodes in the file's order.
  1.19 orders them by a reverse DFS from the YieldOp's producers that visits, among a
  node's producers, the one farthest from the graph's sources first (so that a long chain,
  the attention scores, comes before a short side branch, the mask built from the inputs,
  that joins it), at equal distance the higher node index first; Shape and Size nodes
  follow their producer.

Node indices are those of ORT's session: the positions in the graph ORTModule handed it
(``TrainingGraph.session_indices``, from ``*_optimized_training.onnx``). Without that graph
an estimate stands in: on 1.17, the distance from the graph's sources, then the file position
(all 1.17.3 captures agree with it); on 1.19, the file position, the earlier node first. Checked against the VERBOSE
search logs of 1.17.3, 1.18.0 and 1.19.2 (every plan's node names in ORT's order) on tiny
GPT-2, Llama, T5 and BERT, and Qwen2 on 1.19.2.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from memopt.backends.ort.graph.runs import Runs
from memopt.backends.ort.graph.training_graph import TrainingGraph

__all__ = ["memory_efficient_backward", "memory_efficient_order", "priority_order"]

_SHAPE_OPS = ("Shape", "Size")


def memory_efficient_order(graph: TrainingGraph, *, deepest_first: bool) -> list[int]:
    """Node orders (file positions) in ORT's memory-efficient order, the YieldOp right after
    the forward nodes; those in file order, or (``deepest_first``, 1.19) in 1.19's DFS order.
    A graph without a YieldOp keeps its file order."""
    yield_op = next((node.order for node in graph.nodes if node.op_type == "YieldOp"), None)
    if yield_op is None:
        return [node.order for node in graph.nodes]
    producers = [_producers(graph, node.order) for node in graph.nodes]
    distance = _longest_distance(graph, producers)
    if graph.session_indices is None:  # the earlier in the file first
        index = [-order for order in range(len(graph.nodes))]
    else:
        index = list(graph.session_indices)
    forward = _reverse_dfs(producers[yield_op], producers, lambda order: (distance[order], index[order]))
    forward = _with_shape_nodes(graph, producers, forward)
    if not deepest_first:
        forward.sort()
    seen = {*forward, yield_op}
    return [*forward, yield_op, *(node.order for node in graph.nodes if node.order not in seen)]


def memory_efficient_backward(yield_op: int, forward: np.ndarray, producers: Runs, node_index: np.ndarray) -> list[int]:
    """The YieldOp and every node not ``forward`` (a flag per node), in the order ORT 1.18 and
    1.19 run them under the memory-efficient sort; nodes are numbers, ``producers`` holds each
    node's producers (one per input edge) and ``node_index`` ORT's node indices.

    The main path is a breadth-first Kahn walk from the YieldOp, successors by node index.
    The branch graph (nodes fed only by forward tensors, graph inputs and initializers, and
    what only they feed: recomputed subgraphs, gradients of stashed tensors alone) does not
    wait in that walk: the part a main-path node reads is run just before it, in the branch
    graph's own breadth-first order. What the main path never reads runs at the end.
    """
    # Imported here: numba's import costs every command that reads a graph (scan, parse's
    # checks) about a fifth of a second; only a simulation runs this walk, once per config.
    from memopt.backends.ort.graph.topology_kernel import backward_walk

    walked = backward_walk(yield_op, forward, producers.start, producers.ids, np.asarray(node_index, np.int64))
    return list(walked.tolist())


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


def priority_order(graph: TrainingGraph) -> list[int]:
    """Node orders (file positions) in ORT 1.17's priority-based order."""
    producers = [_producers(graph, node.order) for node in graph.nodes]
    consumers: list[list[int]] = [[] for _ in graph.nodes]
    for order, inputs in enumerate(producers):
        for producer in inputs:
            consumers[producer].append(order)
    waiting = [len(inputs) for inputs in producers]
    index = list(graph.session_indices) if graph.session_indices is not None else _index_estimate(graph, producers)

    def rank(order: int) -> tuple[bool, bool, int, int]:
        node = graph.nodes[order]
        return node.op_type not in _SHAPE_OPS, node.backward_pass, index[order], order

    ready = [rank(order) for order, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    found = []
    while ready:
        current = heapq.heappop(ready)[-1]
        found.append(current)
        for consumer in consumers[current]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, rank(consumer))
    return found


def _index_estimate(graph: TrainingGraph, producers: Sequence[Sequence[int]]) -> list[int]:
    """Stand-ins for ORT's node indices when the session's graph is not at hand: the exported
    graph lists nodes as the model's forward runs, so a node near the inputs (a mask built
    from them) got a lower index than a deep one joining it (the attention scores), which
    the saved file places first. By distance from the graph's sources, then file position."""
    distance = _longest_distance(graph, producers)
    ranked = sorted(range(len(graph.nodes)), key=lambda order: (distance[order], order))
    index = [0] * len(graph.nodes)
    for estimate, order in enumerate(ranked):
        index[order] = estimate
    return index


def _reverse_dfs(
    start: Sequence[int], producers: Sequence[Sequence[int]], key: Callable[[int], tuple[int, int]]
) -> list[int]:
    """Post-order DFS over producers from ``start`` (its last node first): of a node's
    producers, the one with the largest ``key`` is visited first."""
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
        stack.extend((p, False) for p in sorted(producers[order], key=key))
    return found


def _with_shape_nodes(graph: TrainingGraph, producers: Sequence[Sequence[int]], forward: list[int]) -> list[int]:
    """``forward`` with the Shape and Size nodes of its nodes right after them (ORT frees the
    input earlier); several of one node in reverse file order, as ORT inserts each there."""
    inside = set(forward)
    following: dict[int, list[int]] = {}
    for node in graph.nodes:
        if node.op_type in _SHAPE_OPS and producers[node.order] and node.order not in inside:
            parent = producers[node.order][0]
            if parent in inside:
                following.setdefault(parent, []).insert(0, node.order)
    return [placed for order in forward for placed in (order, *following.get(order, ()))]
