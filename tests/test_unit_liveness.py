"""The liveness simulation on hand-made training graphs: allocation, frees, views, recompute."""

from __future__ import annotations

from memopt.graph.training_graph import Node, TensorInfo, TrainingGraph
from memopt.predict.liveness import ActivationSimulator, Recompute, simulate

FLOAT = 1  # TensorProto.FLOAT: 4 bytes


def graph(
    nodes: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]], outputs: tuple[str, ...] = ()
) -> TrainingGraph:
    """Nodes as (name, op, inputs, outputs); every tensor is ``b`` × 256 floats (1 KiB per sample)."""
    built = [Node(i, name, op, "", 1, inputs, outs) for i, (name, op, inputs, outs) in enumerate(nodes)]
    tensors = {t: TensorInfo(FLOAT, ("b", 256)) for n in built for t in (*n.inputs, *n.outputs)}
    return TrainingGraph(built, tensors, graph_inputs=("x",), graph_outputs=outputs)


# forward: x -> a (Gelu) -> c (MatMul) -> yield; backward reads a (stashed) and produces the gradient.
STEP = graph(
    [
        ("gelu", "Gelu", ("x",), ("a",)),
        ("mm", "MatMul", ("a", "w"), ("c",)),
        ("yield", "YieldOp", ("c",), ("dc",)),
        ("mm_grad", "MatMul", ("dc", "a"), ("dw",)),
    ],
    outputs=("dw",),
)


def test_tensors_live_from_producer_to_last_consumer() -> None:
    timeline = simulate(STEP, {"b": 1})
    # At the YieldOp: a (stashed), c, dc and the loss's copy of c: 4 KiB.
    assert timeline.peak_bytes == 4 * 1024
    assert timeline.phase == "loss"


def test_recompute_frees_the_stashed_tensor_until_backward() -> None:
    recomputed = simulate(STEP, {"b": 1}, [Recompute("gelu", ("gelu",))])
    # a is freed after mm in forward and recreated before mm_grad: the YieldOp holds 3 KiB.
    assert recomputed.peak_bytes == 3 * 1024


def test_views_share_their_input_buffer() -> None:
    viewed = graph(
        [
            ("gelu", "Gelu", ("x",), ("a",)),
            ("view", "Reshape", ("a", "shape"), ("v",)),
            ("yield", "YieldOp", ("v",), ("dv",)),
        ]
    )
    assert simulate(viewed, {"b": 2}).peak_bytes == 3 * 2 * 1024  # a (= v), dv, the loss's copy


def test_simulator_memoises_and_honours_counts() -> None:
    simulator = ActivationSimulator(STEP, {"Gelu+:1:-1": (Recompute("gelu", ("gelu",)),)})
    full = simulator.timeline({"b": 1}, ["Gelu+:1:-1"])
    assert simulator.timeline({"b": 1}, ["Gelu+:1:-1"]) is full
    assert simulator.timeline({"b": 1}, ["Gelu+:1:-1"], {"Gelu+:1:-1": 0}).peak_bytes == 4 * 1024
