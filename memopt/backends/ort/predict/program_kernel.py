"""How each output of a schedule gets its buffer, ORT's allocation planner's rules as one
compiled loop over the steps (``memopt.backends.ort.predict.liveness`` holds the rules' reasons and builds
the arrays): a planner builds a program per config it tries, every step of the graph each.

Tensors and steps are numbers. A step's inputs and outputs are runs of a flat array
(``input_start[i]:input_start[i + 1]``), -1 for an absent one. ``owner[t]``: the tensor whose
buffer tensor ``t`` lies in (itself where it allocated one), -1 where it lies in none of ORT's
(a view of a graph input or weight).
"""

from __future__ import annotations

import numpy as np

from memopt.compiled import compiled

__all__ = ["assign_buffers"]


@compiled
def assign_buffers(
    input_start: np.ndarray,
    input_ids: np.ndarray,
    output_start: np.ndarray,
    output_ids: np.ndarray,
    view: np.ndarray,
    in_place: np.ndarray,
    uses: np.ndarray,
    counting: bool,
    not_shared: np.ndarray,
    shape: np.ndarray,
    reader_start: np.ndarray,
    reader_steps: np.ndarray,
    node_index: np.ndarray,
    yield_index: int,
    owner: np.ndarray,
) -> None:
    """``owner`` of every output, step by step. ``view``/``in_place``: per step, whether its
    first output may share its first input's buffer as a view or written in place, the latter
    only with one use left of that buffer (``uses``: ORT's use counts, kept where ``counting``)
    and the same ``shape`` (a number per shape, -1 for none); ``not_shared``: the tensors that
    never share (PyTorch's outputs, graph outputs); readers of tensor ``t``:
    ``reader_steps[reader_start[t]:reader_start[t + 1]]``, in step order. An output whose
    first reader by ``node_index`` is the YieldOp (step ``yield_index``) never shares."""
    uses_left = np.zeros(len(owner), np.int64)
    for step in range(len(input_start) - 1):
        inputs_from, inputs_to = input_start[step], input_start[step + 1]
        outputs_from, outputs_to = output_start[step], output_start[step + 1]
        source = input_ids[inputs_from] if inputs_to > inputs_from else -1
        if source < 0 or not (view[step] or in_place[step]):
            for k in range(outputs_from, outputs_to):
                name = output_ids[k]
                if name >= 0:
                    owner[name] = name
                    if counting:
                        uses_left[name] = uses[name]
        else:
            first = -1  # the first reader by node index, the earliest listed among equals
            for k in range(outputs_from, outputs_to):
                name = output_ids[k]
                if name >= 0:
                    for r in range(reader_start[name], reader_start[name + 1]):
                        reader = reader_steps[r]
                        if first < 0 or node_index[reader] < node_index[first]:
                            first = reader
            feeds_yield = first >= 0 and first == yield_index
            for k in range(outputs_from, outputs_to):
                name = output_ids[k]
                if name < 0:
                    continue
                may_share = k == outputs_from and not feeds_yield and not not_shared[name]
                shares = -2  # none: the output allocates
                if may_share and view[step]:
                    shares = owner[source]
                elif may_share and counting and owner[source] >= 0:
                    if uses_left[owner[source]] == 1 and shape[source] >= 0 and shape[source] == shape[name]:
                        shares = owner[source]
                if shares == -2:
                    owner[name] = name
                    if counting:
                        uses_left[name] = uses[name]
                else:
                    owner[name] = shares
                    if shares >= 0 and counting:
                        uses_left[shares] += uses[name]
        if counting:
            for k in range(inputs_from, inputs_to):
                name = input_ids[k]
                if name >= 0 and owner[name] >= 0:
                    uses_left[owner[name]] -= 1
            for k in range(outputs_from, outputs_to):
                name = output_ids[k]
                if name >= 0 and owner[name] >= 0:
                    uses_left[owner[name]] -= 1
