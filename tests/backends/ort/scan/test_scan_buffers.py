"""Fast unit tests of the Plan-table rows ORT makes of plans that share a buffer, and of the
statistics outputs ORT types although the saved graph does not (tiny onnx.helper graphs, no ORT).
"""

from __future__ import annotations

from onnx import TensorProto
from support.graphs import MS, keys, node, training_graph, yield_op

from memopt.backends.ort.graph.training_graph import TrainingGraph
from memopt.backends.ort.scan import scan_graph
from memopt.graph.polynomial import Polynomial

SHAPE = (TensorProto.INT64, (2,))


def norm_then_view(*, statistics_typed: bool = True) -> TrainingGraph:
    """y, mean, inv = LayerNorm(x); v = Reshape(y) feeds a MatMul whose weight grad reads v."""
    statistics = {} if statistics_typed else {"mean": None, "inv": None}
    return training_graph(
        node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv"], name="norm"),
        node("Reshape", ["y", "shape"], ["v"], name="view"),
        node("MatMul", ["v", "w"], ["out"], name="fc"),
        yield_op("out"),
        node("LayerNormalizationGrad", ["dy", "x", "scale", "mean", "inv"], ["dx", "ds", "db"], domain=MS),
        node("MatMul", ["v", "dout"], ["dw"]),
        tensors={
            "mean": (TensorProto.FLOAT, ("batch", 1)),
            "inv": (TensorProto.FLOAT, ("batch", 1)),
            "shape": SHAPE,
            "scale": (TensorProto.FLOAT, (16,)),
            "bias": (TensorProto.FLOAT, (16,)),
            "w": (TensorProto.FLOAT, (16, 16)),
            **statistics,
        },
        inputs=("x", "scale", "bias", "shape", "w"),
    )


def test_a_view_of_a_planned_node_is_listed_only_with_its_plans() -> None:
    report = scan_graph(norm_then_view(), "1.19.2")
    assert sorted(keys(report)) == ["LayerNormalization+:1:-1", "LayerNormalization+:1:-1,Reshape+:1:-1"]
    combined = next(p for p in report.patterns if "," in p.key)
    assert combined.frequency == 1
    # The view is the norm's buffer: only the statistics are freed.
    assert combined.exact == Polynomial.product_of(["batch"]).scale(8)


def test_a_view_of_a_graph_input_keeps_its_own_row() -> None:
    graph = training_graph(
        node("Reshape", ["x", "shape"], ["v"], name="view"),
        node("MatMul", ["v", "w"], ["out"], name="fc"),
        yield_op("out"),
        node("MatMul", ["v", "dout"], ["dw"]),
        tensors={"shape": SHAPE, "w": (TensorProto.FLOAT, (16, 16))},
        inputs=("x", "shape", "w"),
    )
    report = scan_graph(graph, "1.19.2")
    assert keys(report) == ["Reshape+:1:-1"]
    assert report.patterns[0].exact == Polynomial.product_of(["batch"]).scale(64)


def test_a_view_recomputed_with_its_source_keeps_its_own_row() -> None:
    graph = training_graph(
        node("MatMul", ["x", "w"], ["h"], name="fc"),
        node("Reshape", ["h", "shape"], ["v"], name="view"),
        node("Gelu", ["v"], ["g"], domain=MS, name="act"),
        yield_op("g"),
        node("GeluGrad", ["dg", "v"], ["dv"], domain=MS),
        tensors={"shape": SHAPE, "w": (TensorProto.FLOAT, (16, 16))},
        inputs=("x", "shape", "w"),
    )
    assert keys(scan_graph(graph, "1.19.2")) == ["MatMul+Reshape+:1:-1"]


def test_a_view_of_a_node_without_plans_is_not_listed() -> None:
    # TopK is not recomputable: its output is stashed, so the view's plan stops there,
    # and ORT finds no plan of TopK to list the view's plan with.
    graph = training_graph(
        node("TopK", ["x", "k"], ["h", "idx"], name="top"),
        node("Unsqueeze", ["h", "axes"], ["v"], name="view"),
        node("Gelu", ["v"], ["g"], domain=MS, name="act"),
        yield_op("g"),
        node("GeluGrad", ["dg", "v"], ["dv"], domain=MS),
        node("Identity", ["h"], ["hb"]),
        tensors={
            "k": SHAPE,
            "axes": SHAPE,
            "idx": (TensorProto.INT64, ("batch", 16)),
            "v": (TensorProto.FLOAT, ("batch", 1, 16)),
        },
        inputs=("x", "k", "axes"),
    )
    assert "Unsqueeze+:1:-1" in keys(scan_graph(graph, "1.16.3"))  # <= 1.16: no execution-plan rows
    assert "Unsqueeze+:1:-1" not in keys(scan_graph(graph, "1.19.2"))


def test_untyped_layer_norm_statistics_are_typed_as_ort_types_them() -> None:
    graph = norm_then_view(statistics_typed=False)
    assert graph.tensor("mean").elem_type == TensorProto.FLOAT
    assert graph.tensor("inv").dims == ("batch", 1)
    assert "LayerNormalization+:1:-1" in keys(scan_graph(graph, "1.19.2"))


def test_untyped_concat_lengths_are_int64_per_input() -> None:
    graph = training_graph(
        node("Neg", ["x"], ["n"]),
        node("ConcatTraining", ["n", "x"], ["c", "lengths"], domain=MS, axis=1),
        yield_op("c"),
        tensors={"lengths": None},
    )
    assert graph.tensor("lengths").elem_type == TensorProto.INT64
    assert graph.tensor("lengths").dims == (2,)
