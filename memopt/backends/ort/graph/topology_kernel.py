"""The walk of ORT's memory-efficient backward order (``memopt.backends.ort.graph.topology`` holds its rules),
compiled with numba: a planner asks for it once per config it tries, over every node of the
graph. Nodes are numbers; node ``i``'s producers, one per input edge, are
``producer_ids[producer_start[i]:producer_start[i + 1]]``.
"""

from __future__ import annotations

import numpy as np

from memopt.compiled import compiled

__all__ = ["backward_walk"]


@compiled
def backward_walk(
    yield_op: int, forward: np.ndarray, producer_start: np.ndarray, producer_ids: np.ndarray, node_index: np.ndarray
) -> np.ndarray:
    """The YieldOp and every node not ``forward`` (a flag per node) in the memory-efficient
    order: the branch graph found by a Kahn walk, then the main walk from the YieldOp, each
    node preceded by the branch nodes it needs (in the branch's order), then the branch
    nodes no main node needed."""
    count = len(node_index)
    by_index = np.argsort(node_index, kind="mergesort")  # stable: equal indices keep their order
    # Each node's consumers, one per input edge, by node index.
    consumer_start = np.zeros(count + 1, np.int64)
    for edge in range(len(producer_ids)):
        consumer_start[producer_ids[edge] + 1] += 1
    for node in range(count):
        consumer_start[node + 1] += consumer_start[node]
    filled = consumer_start[:-1].copy()
    consumer_ids = np.empty(len(producer_ids), np.int64)
    for node in by_index:
        for edge in range(producer_start[node], producer_start[node + 1]):
            producer = producer_ids[edge]
            consumer_ids[filled[producer]] = node
            filled[producer] += 1
    backward = np.zeros(count, np.bool_)
    waiting = np.zeros(count, np.int64)  # per backward node, its input edges from backward nodes
    for node in range(count):
        if not forward[node] and node != yield_op:
            backward[node] = True
            for edge in range(producer_start[node], producer_start[node + 1]):
                if not forward[producer_ids[edge]]:
                    waiting[node] += 1
    # The branch graph: a Kahn walk from the backward nodes that wait for none.
    queue = np.empty(count + 1, np.int64)
    head = tail = 0
    for node in by_index:
        if backward[node] and waiting[node] == 0:
            queue[tail] = node
            tail += 1
    branch_waiting = waiting.copy()
    while head < tail:
        current = queue[head]
        head += 1
        for k in range(consumer_start[current], consumer_start[current + 1]):
            consumer = consumer_ids[k]
            if backward[consumer]:
                branch_waiting[consumer] -= 1
                if branch_waiting[consumer] == 0:
                    queue[tail] = consumer
                    tail += 1
    branch = queue[:tail].copy()
    in_branch = np.zeros(count, np.bool_)
    rank = np.full(count, -1, np.int64)
    for position in range(len(branch)):
        in_branch[branch[position]] = True
        rank[branch[position]] = position
    main_waiting = np.zeros(count, np.int64)
    for node in range(count):
        if backward[node]:
            for edge in range(producer_start[node], producer_start[node + 1]):
                producer = producer_ids[edge]
                if not forward[producer] and not in_branch[producer]:
                    main_waiting[node] += 1
    # The main walk from the YieldOp; before each node, the branch nodes it needs not yet run.
    found = np.empty(count, np.int64)
    found_count = 0
    done = np.zeros(count, np.bool_)
    seen = np.full(count, -1, np.int64)  # the main node whose needs last reached a branch node
    stack = np.empty(len(producer_ids) + 1, np.int64)
    needed_ranks = np.empty(count, np.int64)
    head = tail = 0
    queue[tail] = yield_op
    tail += 1
    while head < tail:
        current = queue[head]
        head += 1
        depth = 0
        for edge in range(producer_start[current], producer_start[current + 1]):
            producer = producer_ids[edge]
            if in_branch[producer] and not done[producer]:
                stack[depth] = producer
                depth += 1
        needed = 0
        while depth > 0:
            depth -= 1
            node = stack[depth]
            if seen[node] == current:
                continue
            seen[node] = current
            needed_ranks[needed] = rank[node]
            needed += 1
            for edge in range(producer_start[node], producer_start[node + 1]):
                producer = producer_ids[edge]
                if in_branch[producer] and not done[producer] and seen[producer] != current:
                    stack[depth] = producer
                    depth += 1
        for position in np.sort(needed_ranks[:needed]):
            node = branch[position]
            found[found_count] = node
            found_count += 1
            done[node] = True
        found[found_count] = current
        found_count += 1
        for k in range(consumer_start[current], consumer_start[current + 1]):
            consumer = consumer_ids[k]
            if backward[consumer] and not in_branch[consumer]:
                main_waiting[consumer] -= 1
                if main_waiting[consumer] == 0:
                    queue[tail] = consumer
                    tail += 1
    for node in branch:
        if not done[node]:
            found[found_count] = node
            found_count += 1
    walked: np.ndarray = found[:found_count].copy()
    return walked
