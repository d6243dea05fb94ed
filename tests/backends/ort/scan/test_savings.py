"""Fast unit tests of plan savings and Plan-table grouping on tiny graphs, no ORT."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from support.graphs import MS, keys, node, stashed_gelu, training_graph, yield_op

from memopt.backends.ort.config import OptimizationType
from memopt.backends.ort.graph.training_graph import TrainingGraph
from memopt.backends.ort.rules import ProbeLevel
from memopt.backends.ort.scan import scan_graph
from memopt.graph import Polynomial

# --- one plan's saving: the stashed output's bytes ---


def test_saving_is_the_stashed_output_bytes_as_a_polynomial_in_dims() -> None:
    (pattern,) = scan_graph(stashed_gelu(), "1.19.2").patterns
    assert pattern.exact == Polynomial({(("batch", 1), ("seq", 1)): Fraction(256)})  # 64 elements x 4 bytes
    assert pattern.ort == pattern.exact
    assert pattern.exact.evaluate({"batch": 4, "seq": 8}) == 4 * 8 * 64 * 4
    assert str(pattern.exact) == "256.0*batch*seq"  # sympy's style, as ORT prints it
    assert pattern.elements == Polynomial.product_of(["batch", "seq", 64])


@pytest.mark.parametrize(
    ("elem_type", "size"),
    [
        (TensorProto.FLOAT, 4),
        (TensorProto.FLOAT16, 2),
        (TensorProto.BFLOAT16, 2),
        (TensorProto.DOUBLE, 8),
        (TensorProto.INT64, 8),
        (TensorProto.INT8, 1),
        (TensorProto.BOOL, 1),
    ],
)
def test_saving_scales_with_the_element_size(elem_type: int, size: int) -> None:
    (pattern,) = scan_graph(stashed_gelu(elem_type), "1.19.2").patterns
    assert pattern.exact.evaluate({"batch": 2, "seq": 3}) == 2 * 3 * 64 * size


_SCANS = {
    half: scan_graph(stashed_gelu(TensorProto.FLOAT16 if half else TensorProto.FLOAT), "1.19.2")
    for half in (False, True)
}


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 4096), seq=st.integers(1, 8192), half=st.booleans())
def test_saving_evaluates_to_elements_times_bytes_at_any_dims(batch: int, seq: int, half: bool) -> None:
    report = _SCANS[half]
    assert report.patterns[0].exact.evaluate({"batch": batch, "seq": seq}) == batch * seq * 64 * (2 if half else 4)


def test_fully_static_saving_is_a_constant() -> None:
    (pattern,) = scan_graph(stashed_gelu(dims=(4, 8, 64)), "1.19.2").patterns
    assert pattern.exact == Polynomial.constant(4 * 8 * 64 * 4) and not pattern.exact.symbols


def test_dim_written_as_an_expression_is_read_as_one() -> None:
    """ORT's shape inference names merged dims like ``2*seq``; sympy (and memopt) read them as products."""
    (pattern,) = scan_graph(stashed_gelu(dims=("batch", "2*seq")), "1.19.2").patterns
    assert pattern.exact == Polynomial.product_of(["batch", "seq"]).scale(8)


def test_unnamed_dims_become_numbered_empty_dim_params() -> None:
    graph = training_graph(
        node("Gelu", ["x"], ["g"], domain=MS),
        node("Neg", ["x"], ["n"]),
        node("Mul", ["g", "n"], ["y"]),
        yield_op("y"),
        node("Mul", ["g", "n"], ["dx"]),
        tensors={"g": (TensorProto.FLOAT, (None, 16)), "n": (TensorProto.FLOAT, (None, 16))},
    )
    report = scan_graph(graph, "1.19.2")
    by_key = {p.key: p.exact for p in report.patterns}
    # plans are found in reverse topological order: Neg's output takes the first name, ORT's 0
    assert by_key == {
        "Neg+:1:-1": Polynomial.product_of(["empty_dim_param0", 64]),
        "Gelu+:1:-1": Polynomial.product_of(["empty_dim_param1", 64]),
    }


def test_unknown_shape_is_symbolic_in_unknown_with_a_warning() -> None:
    report = scan_graph(stashed_gelu(dims=None), "1.19.2")
    (pattern,) = report.patterns
    assert pattern.exact == Polynomial.symbol("unknown").scale(4)
    assert any("shape of g unknown" in w for w in report.warnings)


def test_reshape_with_an_unnamed_output_dim_is_measured_by_its_input() -> None:
    graph = training_graph(
        node("Reshape", ["x", "shape"], ["r"]),
        node("Mul", ["r", "r"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "r"], ["dx"]),
        tensors={"shape": (TensorProto.INT64, (3,)), "r": (TensorProto.FLOAT, (None, 4, 4))},
        inputs=("x", "shape"),
    )
    (pattern,) = scan_graph(graph, "1.19.2").patterns
    assert pattern.exact == Polynomial.product_of(["batch", 16]).scale(4)


@pytest.mark.parametrize(("source", "saved_bytes"), [(TensorProto.FLOAT16, 2), (TensorProto.BOOL, 3)])
def test_compromise_saves_one_minus_the_size_ratio(source: int, saved_bytes: int) -> None:
    """An up-cast to fp32 kept as its input saves 1 - in/out of the fp32 output: fp16 0.5, bool 0.75."""
    graph = training_graph(
        node("Cast", ["x_in"], ["c"], to=TensorProto.FLOAT),
        node("Mul", ["c", "c"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "c"], ["dx"]),
        tensors={"x_in": (source, ("batch", 16))},
        inputs=("x_in",),
    )
    savings = {p.key: p.exact for p in scan_graph(graph, "1.19.2").patterns}
    assert savings == {
        "Cast+:1:-1": Polynomial.symbol("batch").scale(16 * 4),
        "Cast+:2:-1": Polynomial.symbol("batch").scale(16 * saved_bytes),
    }


def _dropout() -> TrainingGraph:
    """Dropout whose data output (fp32) and mask (bool) are both read by backward."""
    return training_graph(
        node("Dropout", ["x", "ratio", "training"], ["d", "mask"]),
        node("Mul", ["d", "d"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "d"], ["dd"]),
        node("DropoutGrad", ["dd", "mask", "ratio", "training"], ["dx"], domain=MS),
        tensors={
            "mask": (TensorProto.BOOL, ("batch", 16)),
            "ratio": (TensorProto.FLOAT, ()),
            "training": (TensorProto.BOOL, ()),
        },
        inputs=("x", "ratio", "training"),
    )


def test_ort_counts_only_the_last_stashed_output_of_a_node() -> None:
    """1.19 stashes Dropout's data and mask; ORT's figure counts one of them (hash order), memopt both."""
    (pattern,) = scan_graph(_dropout(), "1.19.2").patterns
    data, mask = Polynomial.symbol("batch").scale(64), Polynomial.symbol("batch").scale(16)
    assert pattern.key == "Dropout+:1:-1" and pattern.frequency == 1
    assert pattern.exact == data + mask
    assert pattern.ort == mask
    assert pattern.ort_matches(data) and pattern.ort_matches(mask) and pattern.ort_matches(data + mask)
    assert not pattern.ort_matches(data.scale(2))
    assert pattern.ort_matches(Polynomial.symbol("input_ids_dim0").scale(64), dims={"input_ids_dim0": 3, "batch": 3})


def test_before_1_19_the_dropout_mask_is_not_stashed() -> None:
    (pattern,) = scan_graph(_dropout(), "1.18.0").patterns
    assert pattern.exact == pattern.ort == Polynomial.symbol("batch").scale(64)


def test_stashed_total_counts_every_candidate_recomputable_or_not() -> None:
    graph = training_graph(
        node("MatMul", ["x", "w"], ["h"]),
        node("Gelu", ["h"], ["g"], domain=MS),
        node("Mul", ["g", "g"], ["y"]),
        yield_op("y"),
        node("GeluGrad", ["dy", "h"], ["dh"], domain=MS),
        node("Mul", ["dy", "g"], ["dg"]),
        tensors={"w": (TensorProto.FLOAT, (16, 32)), "h": (TensorProto.FLOAT, ("batch", 32))},
        inputs=("x", "w"),
    )
    report = scan_graph(graph, "1.18.0", level=ProbeLevel.BASIC)
    assert keys(report) == ["Gelu+:1:-1"]  # MatMul is not recomputable at BASIC, but h is stashed
    assert report.stashed == Polynomial.symbol("batch").scale(32 * 4 + 16 * 4)
    assert report.symbols == {"batch"}


# --- grouping node plans into Plan-table rows ---


def _two_blocks(width: int = 16) -> TrainingGraph:
    """Two MatMul -> Gelu blocks; backward reads each MatMul output (GeluGrad) and each Gelu output."""
    shape = (TensorProto.FLOAT, ("batch", width))
    weight = (TensorProto.FLOAT, (width, width))
    return training_graph(
        node("MatMul", ["x", "w1"], ["h1"], name="/_original_module/blocks.0/fc/MatMul"),
        node("Gelu", ["h1"], ["g1"], domain=MS, name="/_original_module/blocks.0/act/Gelu"),
        node("MatMul", ["g1", "w2"], ["h2"], name="/_original_module/blocks.1/fc/MatMul"),
        node("Gelu", ["h2"], ["g2"], domain=MS, name="/_original_module/blocks.1/act/Gelu"),
        node("MatMul", ["g2", "w3"], ["y"]),
        yield_op("y"),
        node("MatMul", ["dy", "g2"], ["dw3"]),
        node("GeluGrad", ["dy", "h2"], ["dh2"], domain=MS),
        node("MatMul", ["dh2", "g1"], ["dw2"]),
        node("GeluGrad", ["dh2", "h1"], ["dh1"], domain=MS),
        tensors={"x": shape, "h1": shape, "g1": shape, "h2": shape, "g2": shape, "w1": weight, "w2": weight},
        inputs=("x", "w1", "w2", "w3"),
    )


def test_two_occurrences_of_a_subgraph_group_into_one_row_with_frequency_2() -> None:
    report = scan_graph(_two_blocks(), "1.19.2", level=ProbeLevel.BASIC)
    (pattern,) = report.patterns
    assert (pattern.key, pattern.subgraph, pattern.kind, pattern.frequency) == (
        "Gelu+:1:-1",
        "Gelu+",
        OptimizationType.RECOMPUTE,
        2,
    )
    assert pattern.exact == Polynomial.symbol("batch").scale(2 * 16 * 4)  # the sum over both nodes
    assert [o.nodes for o in pattern.occurrences] == [
        ("/_original_module/blocks.1/act/Gelu",),
        ("/_original_module/blocks.0/act/Gelu",),
    ]
    assert pattern.modules == ("blocks.1.act", "blocks.0.act")


def test_different_subgraphs_are_different_rows() -> None:
    report = scan_graph(_two_blocks(), "1.19.2", level=ProbeLevel.ADVANCED)
    assert {p.key: p.frequency for p in report.patterns} == {"Gelu+:1:-1": 2, "MatMul+:1:-1": 2}


def _independent_plans(add_width: int, mul_width: int) -> TrainingGraph:
    """a = x + x and m = x * x, both stashed, of widths ``add_width`` and ``mul_width``."""
    return training_graph(
        node("Add", ["x", "x"], ["a"]),
        node("Mul", ["x", "x"], ["m"]),
        node("Concat", ["a", "m"], ["y"], axis=1),
        yield_op("y"),
        node("MatMul", ["a", "dy"], ["da"]),
        node("MatMul", ["m", "dy"], ["dm"]),
        tensors={"a": (TensorProto.FLOAT, ("batch", add_width)), "m": (TensorProto.FLOAT, ("batch", mul_width))},
    )


def test_rows_are_ordered_by_saving_at_the_given_dims_largest_first() -> None:
    graph = _independent_plans(add_width=4, mul_width=64)
    assert keys(scan_graph(graph, "1.19.2", dims={"batch": 2})) == ["Mul+:1:-1", "Add+:1:-1"]
    assert keys(scan_graph(_independent_plans(64, 4), "1.19.2", dims={"batch": 2})) == ["Add+:1:-1", "Mul+:1:-1"]


@pytest.mark.parametrize("dims", [None, {"other": 1}])
def test_rows_without_values_for_their_dims_are_in_key_order(dims: dict[str, int] | None) -> None:
    """No dims, or dims missing a saving's symbol (it then counts as 0): ascending keys."""
    assert keys(scan_graph(_independent_plans(4, 64), "1.19.2", dims=dims)) == ["Add+:1:-1", "Mul+:1:-1"]


def test_rows_with_equal_savings_are_in_key_order() -> None:
    """Plans are found Mul first (reverse topological order); the table sorts stably over ascending keys."""
    report = scan_graph(_independent_plans(16, 16), "1.19.2", dims={"batch": 2})
    assert [p.entry.op_type for p in report.analysis.plans] == ["Mul", "Add"]
    assert keys(report) == ["Add+:1:-1", "Mul+:1:-1"]
