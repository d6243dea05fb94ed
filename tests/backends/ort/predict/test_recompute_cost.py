"""Fast unit tests of recompute cost (memopt/backends/ort/predict/recompute_cost.py, memopt/backends/ort/profile.py), no ORT.

A node's profiled kernel time scaled by its work to the target dims; where none was measured,
FLOPs for matrix products (2·M·N·K), bytes read and written for everything else, and one
seconds-per-unit factor that maps the whole graph's work onto a measured step time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from onnx import TensorProto
from support.graphs import MS, node, training_graph, yield_op

from memopt.backends.ort.graph.training_graph import TrainingGraph
from memopt.backends.ort.predict.recompute_cost import (
    BALANCE,
    RecomputeCost,
    Work,
    graph_work,
    nodes_work,
    read_node_times,
    seconds_per_unit,
)
from memopt.backends.ort.profile import node_seconds

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def mlp(elem_type: int = F32) -> TrainingGraph:
    """h = x[batch, 32] · w[32, 8]; g = Gelu(h); backward: GeluGrad."""
    return training_graph(
        node("MatMul", ["x", "w"], ["h"], name="fc"),
        node("Gelu", ["h"], ["g"], domain=MS, name="gelu"),
        yield_op("g"),
        node("GeluGrad", ["dg", "h"], ["dh"], domain=MS, name="gelu_grad"),
        tensors={
            "x": (elem_type, ("batch", 32)),
            "w": (elem_type, (32, 8)),
            **{name: (elem_type, ("batch", 8)) for name in ("h", "g", "dg", "dh")},
        },
        inputs=("x", "w"),
    )


def test_matmul_work_is_2_m_n_k_flops() -> None:
    assert nodes_work(mlp(), ["fc"], {"batch": 4}) == Work(flops=2 * 4 * 8 * 32, bytes=0.0)


def test_batched_matmul_counts_every_leading_dim() -> None:
    graph = training_graph(
        node("MatMul", ["q", "k"], ["s"], name="scores"),
        tensors={
            "q": (F32, ("batch", "heads", "seq", 16)),
            "k": (F32, ("batch", "heads", 16, "seq")),
            "s": (F32, ("batch", "heads", "seq", "seq")),
        },
        inputs=("q", "k"),
    )
    dims = {"batch": 2, "heads": 4, "seq": 10}
    assert nodes_work(graph, ["scores"], dims).flops == 2 * (2 * 4) * 10 * 10 * 16


@pytest.mark.parametrize("op_type", ["Gemm", "FusedMatMul"])
def test_gemm_and_fused_matmul_count_flops_whatever_the_transposes(op_type: str) -> None:
    """A is [K, M] under transA: still 2·M·N·K."""
    graph = training_graph(
        node(op_type, ["a", "b"], ["c"], name="mm", transA=1, **({"domain": MS} if op_type == "FusedMatMul" else {})),
        tensors={"a": (F32, (32, "batch")), "b": (F32, (32, 8)), "c": (F32, ("batch", 8))},
        inputs=("a", "b"),
    )
    assert nodes_work(graph, ["mm"], {"batch": 4}) == Work(2 * 4 * 8 * 32, 0.0)


@pytest.mark.parametrize(
    ("a", "b", "out", "flops"),
    [
        ((8, 32), (4, 32, 16), (4, 8, 16), 2 * 4 * 8 * 32 * 16),  # A broadcast against a batched B
        ((8, 32), (32,), (8,), 2 * 8 * 32),  # matrix times vector
        ((32,), (32, 16), (16,), 2 * 32 * 16),  # vector times matrix
    ],
)
def test_matmul_flops_follow_the_output_and_the_reduced_dim(
    a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...], flops: int
) -> None:
    graph = training_graph(
        node("MatMul", ["a", "b"], ["o"], name="mm"),
        tensors={"a": (F32, a), "b": (F32, b), "o": (F32, out)},
        inputs=("a", "b"),
    )
    assert nodes_work(graph, ["mm"], {}).flops == flops


def test_elementwise_work_is_bytes_read_and_written() -> None:
    assert nodes_work(mlp(), ["gelu"], {"batch": 4}) == Work(flops=0.0, bytes=(4 * 8 + 4 * 8) * 4)


def test_bytes_follow_the_element_size() -> None:
    assert nodes_work(mlp(F16), ["gelu"], {"batch": 4}).bytes == (4 * 8 + 4 * 8) * 2
    assert nodes_work(mlp(F16), ["fc"], {"batch": 4}).flops == nodes_work(mlp(F32), ["fc"], {"batch": 4}).flops


def test_broadcast_input_bytes_count_its_own_size() -> None:
    graph = training_graph(
        node("Add", ["x", "bias"], ["y"], name="add"),
        tensors={"bias": (F32, (16,))},
        inputs=("x", "bias"),
    )
    assert nodes_work(graph, ["add"], {"batch": 3}).bytes == (3 * 16 + 16 + 3 * 16) * 4


def test_work_scales_with_the_dims() -> None:
    small, large = (nodes_work(mlp(), ["fc", "gelu"], {"batch": b}) for b in (4, 12))
    assert (large.flops, large.bytes) == (3 * small.flops, 3 * small.bytes)


def test_nodes_work_sums_named_nodes_and_ignores_unknown_names() -> None:
    dims = {"batch": 4}
    fc, gelu = nodes_work(mlp(), ["fc"], dims), nodes_work(mlp(), ["gelu"], dims)
    assert nodes_work(mlp(), ["fc", "gelu", "no_such_node"], dims) == fc + gelu == Work(fc.flops, gelu.bytes)
    assert nodes_work(mlp(), [], dims) == Work(0.0, 0.0)


def test_a_node_named_twice_is_recomputed_once() -> None:
    # Q, K and V's subgraphs all hold the projection before the split: ORT clones it once.
    dims = {"batch": 4}
    assert nodes_work(mlp(), ["fc", "gelu", "fc"], dims) == nodes_work(mlp(), ["fc", "gelu"], dims)


def test_graph_work_is_every_node_forward_yield_and_backward() -> None:
    graph, dims = mlp(), {"batch": 4}
    assert graph_work(graph, dims) == nodes_work(graph, [n.name for n in graph.nodes], dims)
    assert graph_work(graph, dims).bytes > nodes_work(graph, ["gelu"], dims).bytes


def test_units_weigh_bytes_by_the_device_balance() -> None:
    work = Work(flops=1000.0, bytes=10.0)
    assert work.units(BALANCE["cpu"]) == 1000 + 4 * 10
    assert work.units(BALANCE["cuda"]) == 1000 + 20 * 10


def test_seconds_per_unit_maps_the_graph_work_onto_the_step_time() -> None:
    graph, dims, balance = mlp(), {"batch": 4}, BALANCE["cuda"]
    spu = seconds_per_unit(0.5, graph, dims, balance)
    assert spu * graph_work(graph, dims).units(balance) == pytest.approx(0.5)
    assert seconds_per_unit(1.0, graph, dims, balance) == pytest.approx(2 * spu)
    # the same step time spread over a graph with 4 x the work: each unit is 4 x cheaper
    assert seconds_per_unit(0.5, graph, {"batch": 16}, balance) == pytest.approx(spu / 4)


def test_seconds_per_unit_of_a_graph_without_work_is_zero() -> None:
    assert seconds_per_unit(1.0, TrainingGraph(nodes=[], tensors={}), {}, BALANCE["cpu"]) == 0.0


def test_a_measured_node_costs_its_time_scaled_by_its_work_to_the_target_dims() -> None:
    cost = RecomputeCost(mlp(), BALANCE["cpu"], 1.0, measured={"gelu": 0.002, "fc": 0.010}, measured_dims={"batch": 4})
    assert cost.seconds(["gelu"], {"batch": 4}) == pytest.approx(0.002)
    assert cost.seconds(["gelu"], {"batch": 12}) == pytest.approx(0.006)  # its bytes grow with the batch
    assert cost.seconds(["fc", "gelu", "fc"], {"batch": 8}) == pytest.approx(0.024)  # a shared node counts once


def test_a_node_without_a_measured_time_costs_its_work_in_seconds_per_unit() -> None:
    graph, dims, balance = mlp(), {"batch": 4}, BALANCE["cpu"]
    spu = seconds_per_unit(0.5, graph, dims, balance)
    cost = RecomputeCost(graph, balance, spu, measured={"fc": 0.010}, measured_dims=dims)
    gelu = nodes_work(graph, ["gelu"], dims).units(balance) * spu
    assert cost.seconds(["fc", "gelu", "no_such_node"], dims) == pytest.approx(0.010 + gelu)
    assert RecomputeCost(graph, balance, spu).seconds(["gelu"], dims) == pytest.approx(gelu)


def test_node_seconds_are_each_kernels_median_without_its_first_run() -> None:
    def kernel(node: str, start: int, microseconds: int) -> dict[str, object]:
        return {"cat": "Node", "name": f"{node}_kernel_time", "ts": start, "dur": microseconds}

    events = [
        {"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 90_000},
        kernel("gelu", 100, 5_000),  # the warm-up step's first run: slow
        {"cat": "Node", "name": "gelu_fence_before", "ts": 100, "dur": 1},
        kernel("gelu", 30_000, 1_000),
        kernel("gelu", 20_000, 1_200),
        kernel("gelu", 40_000, 9_000),  # a step hit by something else the cores ran
        kernel("fc", 6_000, 3_000),  # ran once: its only run counts
    ]
    assert node_seconds(events) == {"gelu": pytest.approx(0.0012), "fc": pytest.approx(0.003)}


def test_read_node_times_is_empty_for_a_run_that_wrote_none(tmp_path: Path) -> None:
    assert read_node_times(tmp_path / "node_times.json") == {}
    (tmp_path / "bad.json").write_text("not json")
    assert read_node_times(tmp_path / "bad.json") == {}
    (tmp_path / "good.json").write_text(json.dumps({"node_seconds": {"gelu": 0.001, "odd": "x"}}))
    assert read_node_times(tmp_path / "good.json") == {"gelu": 0.001}


def test_cost_source_says_whether_the_costs_are_profiled() -> None:
    from memopt.backends.ort.predict.calibration import describe_cost_source

    graph, recomputed = mlp(), {"gelu", "fc"}
    profiled = RecomputeCost(graph, BALANCE["cpu"], 1.0, measured={"gelu": 0.002, "fc": 0.01, "other": 0.1})
    assert describe_cost_source(profiled, recomputed, 64, 1.0) == "node times from ORT's profiler at batch 64"
    partly = RecomputeCost(graph, BALANCE["cpu"], 1.0, measured={"gelu": 0.002})
    assert "for 1 of 2 recomputed nodes; the graph's FLOPs and bytes" in describe_cost_source(
        partly, recomputed, 64, 1.0
    )
    work = describe_cost_source(RecomputeCost(graph, BALANCE["cpu"], 1.0), recomputed, 64, 1.3)
    assert (
        work
        == "the graph's FLOPs and bytes through the batch-64 step time, × 1.30 as fitted on trials with plans (no node times measured)"
    )
