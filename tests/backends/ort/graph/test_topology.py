"""Fast unit tests of the node orders ORT's memory optimizer walks (memopt.backends.ort.graph.topology).

Tiny graphs as ORTModule lays them out (support.graphs.training_graph); no ORT. The
rules themselves were read off ORT's VERBOSE search logs (1.17.3, 1.18.0, 1.19.2), which name
every plan's nodes in ORT's order; tests/backends/ort/scan/test_scan_releases.py checks them on real graphs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from support.graphs import node, training_graph, yield_op

from memopt.backends.ort.graph.runs import Runs
from memopt.backends.ort.graph.topology import memory_efficient_backward, memory_efficient_order, priority_order
from memopt.backends.ort.graph.training_graph import TrainingGraph, load_graph, session_input_beside
from memopt.backends.ort.scan import scan_graph


def masked_attention() -> TrainingGraph:
    """A mask branch built from an input (short) joins attention scores (a longer chain) at
    an Add; a backward Reshape that needs only a forward tensor sits before the YieldOp."""
    return training_graph(
        node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT, name="mask_cast"),
        node("Sub", ["one", "m"], ["inverted"], name="mask_sub"),
        node("Transpose", ["x"], ["xt"], name="key_t"),
        node("MatMul", ["xt", "w"], ["scores"], name="scores"),
        node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
        node("Add", ["scaled", "inverted"], ["biased"], name="add_mask"),
        node("Softmax", ["biased"], ["probs"], name="softmax"),
        node("Reshape", ["scores", "shape"], ["flat"], name="grad_reshape"),
        node("MatMul", ["probs", "v"], ["y"], name="context"),
        yield_op("y"),
        node("Mul", ["dy", "probs"], ["dprobs"], name="softmax_grad"),
        node("MatMul", ["flat", "dy"], ["dw"], name="weight_grad"),
        tensors={"mask": (TensorProto.INT64, ("batch", 16)), "shape": (TensorProto.INT64, (2,))},
        inputs=("x", "mask", "w", "one", "scale", "v", "shape"),
    )


def names(graph: TrainingGraph, orders: list[int]) -> list[str]:
    return [graph.nodes[order].name for order in orders]


def test_1_19_order_visits_the_longer_chain_first_and_puts_backward_helpers_after_the_yield() -> None:
    graph = masked_attention()
    assert names(graph, memory_efficient_order(graph, deepest_first=True)) == [
        *("key_t", "scores", "scale", "mask_cast", "mask_sub", "add_mask", "softmax", "context"),
        *("YieldOp_9", "grad_reshape", "softmax_grad", "weight_grad"),
    ]


def test_1_18_order_keeps_the_file_order_of_the_yields_ancestors() -> None:
    graph = masked_attention()
    assert names(graph, memory_efficient_order(graph, deepest_first=False)) == [
        *("mask_cast", "mask_sub", "key_t", "scores", "scale", "add_mask", "softmax", "context"),
        *("YieldOp_9", "grad_reshape", "softmax_grad", "weight_grad"),
    ]


def test_subgraph_strings_follow_the_releases_order() -> None:
    graph = masked_attention()
    softmax_plan = {"1.18.0": "Cast+Sub+Mul+Add+Softmax+", "1.19.2": "Mul+Cast+Sub+Add+Softmax+"}
    for release, subgraph in softmax_plan.items():
        plans = scan_graph(graph, release).analysis.plans
        assert next(p.subgraph for p in plans if p.entry.name == "softmax") == subgraph


def test_a_tensor_a_backward_helper_reads_before_the_yield_is_stashed_from_1_18() -> None:
    graph = masked_attention()

    def stashed(release: str) -> set[str]:
        report = scan_graph(graph, release)
        return {report.graph.nodes[order].name for order in report.analysis.candidates}

    assert "scores" in stashed("1.18.0")  # grad_reshape is backward: not the YieldOp's ancestor
    assert "scores" not in stashed("1.16.3")  # file order: grad_reshape counts as forward


def test_1_17_order_takes_shape_nodes_first_and_backward_nodes_last_then_the_lower_index() -> None:
    graph = training_graph(
        node("Relu", ["x"], ["a"], name="relu"),
        node("Neg", ["x"], ["b"], name="backward_helper", **{"__backwardpass": 1}),
        node("Shape", ["a"], ["s"], name="shape"),
        node("Sigmoid", ["x"], ["c"], name="sigmoid"),
        node("Add", ["a", "c"], ["y"], name="add"),
        yield_op("y"),
        node("Mul", ["dy", "b"], ["dx"], name="grad", **{"__backwardpass": 1}),
        tensors={"s": (TensorProto.INT64, (2,))},
    )
    assert names(graph, priority_order(graph)) == [
        *("relu", "shape", "sigmoid", "add", "YieldOp_5", "backward_helper", "grad"),
    ]


def test_session_indices_come_from_the_graph_the_session_loaded(tmp_path: Path) -> None:
    execution = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="fused_by_session"),
            helper.make_node("Neg", ["a"], ["b"], name="second"),
            helper.make_node("Abs", ["x"], ["c"], name="first"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [],
    )
    session_input = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["c"], name="first"), helper.make_node("Neg", ["a"], ["b"], name="second")],
        "g",
        [],
        [],
    )
    onnx.save(helper.make_model(execution), tmp_path / "x_execution_model_training.onnx")
    onnx.save(helper.make_model(session_input), tmp_path / "x_optimized_training.onnx")
    graph = load_graph(
        tmp_path / "x_execution_model_training.onnx", session_input=tmp_path / "x_optimized_training.onnx"
    )
    assert graph.session_indices == (2, 1, 0)  # a node the session made comes after the loaded ones
    assert load_graph(tmp_path / "x_execution_model_training.onnx").session_indices is None
    assert graph.renumbered([2, 0, 1]).session_indices == (0, 2, 1)


def test_the_session_graph_is_found_beside_the_execution_graph(tmp_path: Path) -> None:
    execution = tmp_path / "memopt_execution_model_training.onnx"
    assert session_input_beside(execution) is None
    (tmp_path / "memopt_optimized_training.onnx").write_bytes(b"")
    assert session_input_beside(execution) == tmp_path / "memopt_optimized_training.onnx"
    assert session_input_beside(tmp_path / "model.onnx") is None


def test_a_graph_without_yield_keeps_its_file_order() -> None:
    graph = training_graph(node("Relu", ["x"], ["a"]), node("Neg", ["a"], ["b"]), node("Abs", ["x"], ["c"], domain=""))
    assert memory_efficient_order(graph, deepest_first=True) == [0, 1, 2]


def test_memory_efficient_backward_runs_a_branch_just_before_its_reader() -> None:
    # 0, 1 forward; 2 the YieldOp; 3 reads the YieldOp's output; 4 reads only a forward
    # tensor (a recomputed node) and feeds 5; 5 and 6 become ready when 3 has run, 5 first
    # (lower index), 4 right before it; 7 reads forward tensors only and nothing on the main
    # path needs it (it feeds a graph output): it runs last.
    producers = Runs.of([[], [0], [1], [2], [0], [3, 4], [3], [1]])
    order = memory_efficient_backward(2, forward_flags({0, 1}, 8), producers, np.arange(8))
    assert order == [2, 3, 4, 5, 6, 7]


def test_memory_efficient_backward_walks_successors_by_node_index() -> None:
    # The YieldOp (1) feeds 2 and 3; ORT's index of 3 is lower, so it runs first.
    order = memory_efficient_backward(1, forward_flags({0}, 4), Runs.of([[], [0], [1], [1]]), np.array([0, 1, 9, 5]))
    assert order == [1, 3, 2]


def forward_flags(forward: set[int], count: int) -> np.ndarray:
    return np.array([node in forward for node in range(count)])
