"""Fast unit tests of ORT's recompute detection rules on tiny graphs.

No ORT: each graph is built with onnx.helper as ORTModule lays one out (forward nodes, a
com.microsoft YieldOp, backward nodes reading stashed forward activations) and loaded with
``graph_from_model`` (``support.graphs.training_graph``).
"""

from __future__ import annotations

import pytest
from onnx import TensorProto
from support.graphs import MS, keys, node, training_graph, yield_op

from memopt.backends.ort.graph.training_graph import TrainingGraph
from memopt.backends.ort.rules import SMALL_STATIC_LIMIT, ProbeLevel
from memopt.backends.ort.scan import ScanError, scan_graph

ALL_RELEASES = ("1.16.3", "1.17.3", "1.18.0", "1.19.2")


def mlp() -> TrainingGraph:
    """h = x·w1, g = Gelu(h), y = g·w2; backward reads h (GeluGrad) and g (dW2)."""
    return training_graph(
        node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        node("Gelu", ["h"], ["g"], domain=MS, name="gelu"),
        node("MatMul", ["g", "w2"], ["y"], name="fc2"),
        yield_op("y"),
        node("MatMul", ["dy", "w2"], ["dg"]),
        node("GeluGrad", ["dg", "h"], ["dh"], domain=MS),
        node("MatMul", ["g", "dy"], ["dw2"]),
        tensors={"w1": (TensorProto.FLOAT, (16, 16)), "w2": (TensorProto.FLOAT, (16, 16))},
        inputs=("x", "w1", "w2"),
    )


def one_op(op_type: str, domain: str = "", opset: int = 17, **attrs: object) -> TrainingGraph:
    """``a = op(x)`` used by a forward Mul (feeding the YieldOp) and by a backward Mul."""
    return training_graph(
        node(op_type, ["x"], ["a"], domain=domain, **attrs),
        node("Mul", ["a", "x"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "a"], ["dx"]),
        opset=opset,
    )


# --- forward/backward split and stashed candidates ---


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_gelu_output_stashed_for_backward_is_a_plan(version: str) -> None:
    report = scan_graph(mlp(), version, level=ProbeLevel.BASIC)
    assert keys(report) == ["Gelu+:1:-1"]
    (plan,) = report.analysis.plans
    assert plan.entry.name == "gelu" and [n.name for n in plan.nodes] == ["gelu"]
    assert plan.stashed_outputs == (0,)


def test_search_stops_at_an_input_stashed_anyway() -> None:
    """Gelu's input h is stashed for GeluGrad: the plan reads it instead of recomputing fc1."""
    report = scan_graph(mlp(), "1.19.2", level=ProbeLevel.ADVANCED)
    plans = {p.entry.name: [n.name for n in p.nodes] for p in report.analysis.plans}
    assert plans == {"gelu": ["gelu"], "fc1": ["fc1"]}


def test_candidates_are_forward_outputs_used_in_forward_and_backward() -> None:
    graph = mlp()
    analysis = scan_graph(graph, "1.18.0").analysis
    assert analysis.yield_order == 3
    assert {graph.nodes[order].name: outputs for order, outputs in analysis.candidates.items()} == {
        "fc1": (0,),
        "gelu": (0,),
    }


def test_output_only_used_in_forward_is_not_stashed() -> None:
    graph = training_graph(
        node("Add", ["x", "x"], ["a"], name="add"),
        node("Gelu", ["a"], ["g"], domain=MS, name="gelu"),
        node("Mul", ["g", "x"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "g"], ["dx"]),
    )
    report = scan_graph(graph, "1.18.0")
    assert [graph.nodes[o].name for o in report.analysis.candidates] == ["gelu"]
    (plan,) = report.analysis.plans
    assert plan.entry.name == "gelu" and plan.subgraph == "Add+Gelu+"  # Add is recomputed, not stashed
    assert keys(report) == ["Add+Gelu+:1:-1"]


def test_output_used_only_in_backward_is_stashed_from_1_19() -> None:
    """1.14–1.18 need forward and backward use; 1.19 takes backward use alone (Dropout masks)."""
    graph = training_graph(
        node("Dropout", ["x", "ratio", "training"], ["d", "mask"], name="dropout"),
        node("MatMul", ["d", "w"], ["y"]),
        yield_op("y"),
        node("MatMul", ["dy", "d"], ["dw"]),
        node("DropoutGrad", ["dy", "mask", "ratio", "training"], ["dx"], domain=MS),
        tensors={
            "mask": (TensorProto.BOOL, ("batch", 16)),
            "ratio": (TensorProto.FLOAT, ()),
            "training": (TensorProto.BOOL, ()),
            "w": (TensorProto.FLOAT, (16, 16)),
        },
        inputs=("x", "ratio", "training", "w"),
    )
    assert scan_graph(graph, "1.18.0").analysis.candidates == {0: (0,)}
    report = scan_graph(graph, "1.19.2")
    assert report.analysis.candidates == {0: (0, 1), 2: (0,)}  # 2: the YieldOp's output dy
    assert [p.stashed_outputs for p in report.analysis.plans] == [(0, 1)]
    assert keys(report) == ["Dropout+:1:-1"]


def test_untyped_output_is_not_a_candidate() -> None:
    # ONNX's shape inference types an ONNX op's output; a contrib op's it cannot.
    graph = training_graph(
        node("Gelu", ["x"], ["a"], domain=MS),
        node("Mul", ["a", "x"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "a"], ["dx"]),
        tensors={"a": None},
    )
    report = scan_graph(graph, "1.18.0")
    assert report.analysis.candidates == {} and report.patterns == ()


def test_1_19_stashes_yield_op_outputs_but_never_recomputes_them() -> None:
    graph = mlp()
    assert 3 not in scan_graph(graph, "1.18.0").analysis.candidates
    report = scan_graph(graph, "1.19.2", level=ProbeLevel.ADVANCED)
    assert report.analysis.candidates[3] == (0,)  # dy, read by the backward MatMul
    assert all(p.entry.op_type != "YieldOp" for p in report.analysis.plans)


def test_graph_without_yield_op_has_no_plans_and_says_why() -> None:
    graph = training_graph(node("Gelu", ["x"], ["g"], domain=MS), node("Mul", ["g", "g"], ["y"]))
    report = scan_graph(graph, "1.19.2")
    assert report.patterns == () and report.analysis.yield_order is None
    assert any("YieldOp" in w for w in report.warnings)


def test_second_yield_op_is_an_error() -> None:
    graph = training_graph(
        node("Gelu", ["x"], ["g"], domain=MS),
        yield_op("g"),
        node("YieldOp", ["dg"], ["ddg"], domain=MS, name="second_yield"),
    )
    with pytest.raises(ScanError, match="multiple YieldOps.*second_yield is the second one"):
        scan_graph(graph, "1.19.2")


# --- recomputable op tables per release and probe level ---


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_never_recomputable_op_has_no_plan(version: str) -> None:
    """Relu is in no release's table, at any level."""
    report = scan_graph(one_op("Relu"), version, level=ProbeLevel.ADVANCED)
    assert report.patterns == () and 0 in report.analysis.candidates


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_matmul_is_recomputable_only_at_advanced_level(version: str) -> None:
    basic = scan_graph(mlp(), version, level=ProbeLevel.BASIC)
    advanced = scan_graph(mlp(), version, level=ProbeLevel.ADVANCED)
    assert "MatMul+:1:-1" not in keys(basic)
    assert sorted(keys(advanced)) == ["Gelu+:1:-1", "MatMul+:1:-1"]


@pytest.mark.parametrize(("version", "recomputable"), [("1.17.3", False), ("1.18.0", True), ("1.19.2", True)])
def test_gemm_is_recomputable_from_1_18_at_advanced_level(version: str, recomputable: bool) -> None:
    graph = training_graph(
        node("Gemm", ["x", "w", "b"], ["h"], name="gemm"),
        node("Gelu", ["h"], ["g"], domain=MS),
        yield_op("g"),
        node("GeluGrad", ["dg", "h"], ["dh"], domain=MS),
        tensors={"w": (TensorProto.FLOAT, (16, 16)), "b": (TensorProto.FLOAT, (16,))},
        inputs=("x", "w", "b"),
    )
    advanced = scan_graph(graph, version, level=ProbeLevel.ADVANCED)
    assert ("Gemm+:1:-1" in keys(advanced)) is recomputable
    assert "Gemm+:1:-1" not in keys(scan_graph(graph, version, level=ProbeLevel.BASIC))


@pytest.mark.parametrize(
    ("op_type", "domain", "families"),
    [
        ("Transpose", "", {"1.17", "1.18", "1.19"}),  # added in 1.17
        ("Shape", "", {"1.17"}),  # removed again in 1.18
        ("Neg", "", {"1.18", "1.19"}),  # added in 1.18
        ("Gelu", MS, {"1.16", "1.17", "1.18", "1.19"}),
    ],
)
def test_basic_op_table_changes_between_releases(op_type: str, domain: str, families: set[str]) -> None:
    for version in ALL_RELEASES:
        report = scan_graph(one_op(op_type, domain), version, level=ProbeLevel.BASIC)
        assert (keys(report) == [f"{op_type}+:1:-1"]) is (report.family in families), version


@pytest.mark.parametrize(("opset", "recomputable"), [(17, False), (20, True)])
def test_1_18_onnx_gelu_is_recomputable_only_as_its_opset_20_version(opset: int, recomputable: bool) -> None:
    """1.18+ keys the table by domain::OpType and SinceVersion: ai.onnx::Gelu exists from opset 20 only."""
    report = scan_graph(one_op("Gelu", opset=opset), "1.18.0", level=ProbeLevel.BASIC)
    assert (keys(report) == ["Gelu+:1:-1"]) is recomputable


def test_layer_normalization_is_advanced_from_1_17() -> None:
    graph = training_graph(
        node("LayerNormalization", ["x", "scale", "bias"], ["n"], axis=-1),
        node("Mul", ["n", "x"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "n"], ["dx"]),
        tensors={"scale": (TensorProto.FLOAT, (16,)), "bias": (TensorProto.FLOAT, (16,))},
        inputs=("x", "scale", "bias"),
    )
    assert scan_graph(graph, "1.16.3", level=ProbeLevel.ADVANCED).patterns == ()
    for version in ("1.17.3", "1.18.0", "1.19.2"):
        assert scan_graph(graph, version, level=ProbeLevel.BASIC).patterns == ()
        assert keys(scan_graph(graph, version, level=ProbeLevel.ADVANCED)) == ["LayerNormalization+:1:-1"]


@pytest.mark.parametrize(("version", "subgraph"), [("1.17.3", "Reshape+"), ("1.18.0", None), ("1.19.2", None)])
def test_reshape_shape_input_is_followed_from_1_18(version: str, subgraph: str | None) -> None:
    """<= 1.17 follows only Reshape's data input; 1.18+ ignores no input of Reshape, so a shape
    computed by a non-recomputable op (Concat, not used in backward) stops the search."""
    graph = training_graph(
        node("Concat", ["s0", "s1"], ["shape"], axis=0),
        node("Reshape", ["x", "shape"], ["r"]),
        node("Mul", ["r", "r"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "r"], ["dx"]),
        tensors={
            "s0": (TensorProto.INT64, ("k",)),
            "s1": (TensorProto.INT64, ("k",)),
            "shape": (TensorProto.INT64, ("rank",)),  # not static: 1.18's static-edge filter keeps it
        },
        inputs=("x", "s0", "s1"),
    )
    plans = scan_graph(graph, version).analysis.plans
    assert [p.subgraph for p in plans] == ([subgraph] if subgraph else [])


# --- the subgraph search ---


def _gelu_after_add(dims: tuple[int | str, ...]) -> TrainingGraph:
    """a = x + x (forward only), g = Gelu(a) stashed: the search can include the Add."""
    shape = (TensorProto.FLOAT, dims)
    return training_graph(
        node("Add", ["x", "x"], ["a"]),
        node("Gelu", ["a"], ["g"], domain=MS),
        node("Mul", ["g", "g"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "g"], ["dx"]),
        tensors={name: shape for name in ("x", "a", "g", "y", "dy", "dx")},
    )


@pytest.mark.parametrize(
    ("version", "dims", "subgraph"),
    [
        ("1.17.3", (4, 8), "Add+Gelu+"),  # no static-edge filter
        ("1.18.0", (4, 8), "Gelu+"),  # 1.18.0 skips every fully static producer output
        ("1.18.0", (1024, 1024), "Gelu+"),
        ("1.19.2", (4, 8), "Gelu+"),  # 1.19.2 skips it only under 1,048,576 elements
        ("1.19.2", (1024, 1023), "Gelu+"),
        ("1.19.2", (1024, 1024), "Add+Gelu+"),
        ("1.18.0", ("batch", 8), "Add+Gelu+"),  # symbolic shapes are always followed
        ("1.19.2", ("batch", 8), "Add+Gelu+"),
    ],
)
def test_static_shaped_producer_outputs_are_not_followed_from_1_18(
    version: str, dims: tuple[int | str, ...], subgraph: str
) -> None:
    assert SMALL_STATIC_LIMIT == 1024 * 1024
    (plan,) = scan_graph(_gelu_after_add(dims), version).analysis.plans
    assert plan.subgraph == subgraph


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_non_recomputable_producer_not_stashed_stops_the_search(version: str) -> None:
    """Relu's output is only used in forward: the Gelu cannot be recomputed from stashed tensors."""
    graph = training_graph(
        node("Relu", ["x"], ["r"]),
        node("Gelu", ["r"], ["g"], domain=MS),
        node("Mul", ["g", "g"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "g"], ["dx"]),
    )
    assert scan_graph(graph, version).patterns == ()


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_non_recomputable_producer_stashed_anyway_is_a_cut_point(version: str) -> None:
    graph = training_graph(
        node("Relu", ["x"], ["r"]),
        node("Gelu", ["r"], ["g"], domain=MS),
        node("Mul", ["g", "g"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "g"], ["dg"]),
        node("ReluGrad", ["dg", "r"], ["dx"], domain=MS),
    )
    assert keys(scan_graph(graph, version)) == ["Gelu+:1:-1"]


@pytest.mark.parametrize(("version", "subgraph"), [("1.18.0", "Dropout+Gelu+"), ("1.19.2", "Gelu+")])
def test_1_19_reuses_a_producer_with_any_output_used_in_backward(version: str, subgraph: str) -> None:
    """1.19 stops at a Dropout whose mask is stashed although its data output is not."""
    graph = training_graph(
        node("Dropout", ["x", "ratio", "training"], ["d", "mask"]),
        node("Gelu", ["d"], ["g"], domain=MS),
        node("Mul", ["g", "g"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "g"], ["dg"]),
        node("DropoutGrad", ["dg", "mask", "ratio", "training"], ["dx"], domain=MS),
        tensors={
            "mask": (TensorProto.BOOL, ("batch", 16)),
            "ratio": (TensorProto.FLOAT, ()),
            "training": (TensorProto.BOOL, ()),
        },
        inputs=("x", "ratio", "training"),
    )
    (plan,) = [p for p in scan_graph(graph, version).analysis.plans if p.entry.op_type == "Gelu"]
    assert plan.subgraph == subgraph


def _add_chain(length: int) -> TrainingGraph:
    """a1 = x + x, a(i) = a(i-1) + x, ..., a(length) stashed."""
    chain = [node("Add", ["x", "x"], ["a1"])]
    chain += [node("Add", [f"a{i - 1}", "x"], [f"a{i}"]) for i in range(2, length + 1)]
    last = f"a{length}"
    return training_graph(*chain, node("Mul", [last, "x"], ["y"]), yield_op("y"), node("Mul", ["dy", last], ["dx"]))


@pytest.mark.parametrize(
    ("version", "length", "found"),
    [
        ("1.17.3", 15, True),  # <= 1.17: at most 15 nodes
        ("1.17.3", 16, False),
        ("1.18.0", 16, True),  # 1.18+: at most 50
        ("1.19.2", 50, True),
        ("1.19.2", 51, False),
    ],
)
def test_subgraph_larger_than_the_release_limit_is_no_plan(version: str, length: int, found: bool) -> None:
    report = scan_graph(_add_chain(length), version)
    assert keys(report) == (["Add+" * length + ":1:-1"] if found else [])


# --- compromise plans ---


@pytest.mark.parametrize("version", ["1.17.3", "1.18.0", "1.19.2"])
def test_up_cast_has_a_recompute_and_a_compromise_plan(version: str) -> None:
    """fp16 -> fp32: recomputing from the stashed fp16 input saves half the output (type 2 from 1.17)."""
    graph = training_graph(
        node("Cast", ["x16"], ["c"], to=TensorProto.FLOAT),
        node("Mul", ["c", "c"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "c"], ["dx"]),
        tensors={"x16": (TensorProto.FLOAT16, ("batch", 16))},
        inputs=("x16",),
    )
    plans = scan_graph(graph, version).analysis.plans
    assert [(p.kind.name, p.save_ratio) for p in plans] == [("RECOMPUTE", 1.0), ("COMPROMISE", 0.5)]
    assert sorted(keys(scan_graph(graph, version))) == ["Cast+:1:-1", "Cast+:2:-1"]


def test_1_16_enables_compromise_plans_as_type_1() -> None:
    graph = training_graph(
        node("Cast", ["x16"], ["c"], to=TensorProto.FLOAT),
        node("Mul", ["c", "c"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "c"], ["dx"]),
        tensors={"x16": (TensorProto.FLOAT16, ("batch", 16))},
        inputs=("x16",),
    )
    report = scan_graph(graph, "1.16.3")
    assert sorted((p.key, p.kind.name) for p in report.patterns) == [
        ("Cast+:1:-1", "COMPROMISE"),
        ("Cast+:1:-1", "RECOMPUTE"),
    ]


def test_down_cast_has_no_compromise_plan() -> None:
    graph = training_graph(
        node("Cast", ["x"], ["c"], to=TensorProto.FLOAT16),
        node("Mul", ["c", "c"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "c"], ["dx"]),
        tensors={"c": (TensorProto.FLOAT16, ("batch", 16))},
    )
    assert [p.kind.name for p in scan_graph(graph, "1.19.2").analysis.plans] == ["RECOMPUTE"]


# --- transformer layer boundaries ---


def _residual_layer() -> TrainingGraph:
    """a (previous residual) -> LayerNorm -> Softmax -> residual Add(a, s): the LN opens a layer."""
    return training_graph(
        node("Add", ["x", "x"], ["a"], name="prev_residual"),
        node("LayerNormalization", ["a", "scale", "bias"], ["n"], axis=-1),
        node("Softmax", ["n"], ["s"]),
        node("Add", ["a", "s"], ["r"], name="residual"),
        yield_op("r"),
        node("Mul", ["dr", "a"], ["da"]),
        node("Mul", ["dr", "s"], ["ds"]),
        tensors={"scale": (TensorProto.FLOAT, (16,)), "bias": (TensorProto.FLOAT, (16,))},
        inputs=("x", "scale", "bias"),
    )


@pytest.mark.parametrize(
    ("version", "skipped"), [("1.16.3", False), ("1.17.3", True), ("1.18.0", True), ("1.19.2", True)]
)
def test_layer_boundary_probe_keeps_the_residual_feeding_the_next_layer_norm(version: str, skipped: bool) -> None:
    """1.17+ with probe "1:1" skips an entry whose stashed output is input 0 of a boundary LayerNorm."""
    graph = _residual_layer()
    assert "prev_residual" in [p.entry.name for p in scan_graph(graph, version).analysis.plans]
    layerwise = scan_graph(graph, version, layer_boundary=True)
    assert ("prev_residual" not in [p.entry.name for p in layerwise.analysis.plans]) is skipped
    assert layerwise.analysis.boundary_layer_norms == ((1,) if skipped else ())


# --- plan discovery order ---


def test_plans_are_discovered_in_reverse_topological_order() -> None:
    graph = training_graph(
        node("Add", ["x", "x"], ["a"], name="first"),
        node("Sub", ["x", "x"], ["b"], name="second"),
        node("Neg", ["x"], ["c"], name="third"),
        node("Concat", ["a", "b", "c"], ["y"], axis=1),
        yield_op("y"),
        node("Mul", ["a", "b"], ["ab"]),
        node("Mul", ["ab", "c"], ["dx"]),
    )
    report = scan_graph(graph, "1.19.2")
    assert [p.entry.name for p in report.analysis.plans] == ["third", "second", "first"]
