"""The liveness simulation on hand-made training graphs: allocation, frees, views, recompute."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from onnx import TensorProto
from support.graphs import MS, STEP, STEP_NODES, node, node_graph, training_graph, yield_op

from memopt.backends.ort import OrtVersion, PlanKey
from memopt.backends.ort.graph.training_graph import load_graph
from memopt.backends.ort.predict.calibration import plan_savings, require_batch_dim, simulator_for
from memopt.backends.ort.predict.liveness import (
    ActivationSimulator,
    Recompute,
    Timeline,
    _program,
    _schedule,
    _Sizes,
    _SizesAt,
    _transients,
    _without_cyclic_gc,
    simulate,
)
from memopt.backends.ort.predict.memory_model import MemoryModel, Observation, fit_memory_model
from memopt.backends.ort.rules import AnalysisOrder
from memopt.backends.ort.scan import scan_graph
from memopt.cuda_caching import BlockUse, CudaSetup, PoolBlock, PoolLayout, PoolSegment

SAMPLES = Path(__file__).parents[4] / "sample_logs"
MiB = 1 << 20


def test_tensors_live_from_producer_to_last_consumer() -> None:
    timeline = simulate(STEP, {"b": 1})
    # At the YieldOp: a (stashed), c, dc, and PyTorch's loss of c (its log-softmax and that
    # one's gradient): 5 KiB.
    assert timeline.peak_bytes == 5 * 1024
    assert timeline.phase == "loss"


# Two layers whose Gelu outputs (4 KiB per sample) are stashed for backward.
TWO_LAYERS = node_graph(
    [
        ("gelu1", "Gelu", ("x",), ("a1",)),
        ("mm1", "MatMul", ("a1", "w1"), ("h",)),
        ("gelu2", "Gelu", ("h",), ("a2",)),
        ("mm2", "MatMul", ("a2", "w2"), ("c",)),
        ("yield", "YieldOp", ("c",), ("dc",)),
        ("mm2_grad", "MatMul", ("dc", "a2"), ("dh",)),
        ("mm1_grad", "MatMul", ("dh", "a1"), ("dx",)),
    ],
    outputs=("dx",),
    wide=frozenset({"a1", "a2"}),
)


def test_recompute_frees_the_stashed_tensor_until_backward() -> None:
    # At the YieldOp: a1 and a2 (8 KiB), c, dc and two copies of c in PyTorch's loss.
    assert simulate(TWO_LAYERS, {"b": 1}).peak_bytes == 12 * 1024
    recomputed = simulate(TWO_LAYERS, {"b": 1}, [Recompute("gelu1", ("gelu1",))])
    # a1 is freed after mm1 and recreated for mm1_grad: a2 and a1 are never live together.
    assert recomputed.peak_bytes == 8 * 1024


# A model that computes its own loss (a scalar): PyTorch adds nothing at the YieldOp.
OWN_LOSS = node_graph(
    [
        ("gelu", "Gelu", ("x",), ("a",)),
        ("mm", "MatMul", ("a", "w"), ("c",)),
        ("loss", "ReduceMean", ("c",), ("l",)),
        ("yield", "YieldOp", ("l", "c"), ("dl", "dc")),
        ("mm_grad", "MatMul", ("dc", "a"), ("dw",)),
    ],
    outputs=("dw",),
    scalars=frozenset({"l", "dl"}),
)


def test_the_loop_holds_the_outputs_until_the_next_forward_returns() -> None:
    timeline = simulate(OWN_LOSS, {"b": 1}, [Recompute("gelu", ("gelu",))])
    # The training loop keeps c (the model's output) through backward: at mm_grad the
    # recomputed a, c, dc and dw are live, one more than ORT's own graph needs there.
    assert (timeline.peak_node, round(timeline.peak_bytes / 1024)) == ("mm_grad", 4)


def test_a_config_runs_its_recomputed_nodes_just_before_their_first_reader() -> None:
    steps, _ = _schedule(TWO_LAYERS, [Recompute("gelu1", ("gelu1",))], AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST)
    names = [step.node.name + ("'" if step.recomputed else "") for step in steps]
    assert names == ["gelu1", "mm1", "gelu2", "mm2", "yield", "mm2_grad", "gelu1'", "mm1_grad"]


def test_views_share_their_input_buffer() -> None:
    viewed = node_graph(
        [
            ("gelu", "Gelu", ("x",), ("a",)),
            ("view", "Reshape", ("a", "shape"), ("v",)),
            ("yield", "YieldOp", ("v",), ("dv",)),
        ]
    )
    assert simulate(viewed, {"b": 2}).peak_bytes == 4 * 2 * 1024  # a (= v), dv, two in the loss


def test_an_output_the_yieldop_reads_first_gets_a_buffer_of_its_own() -> None:
    # ORT's planner makes no view or in-place output for PyTorch: v is a copy of a, and a
    # (read again in backward) lives beside it.
    viewed = node_graph(
        [
            ("gelu", "Gelu", ("x",), ("a",)),
            ("view", "Reshape", ("a", "shape"), ("v",)),
            ("yield", "YieldOp", ("v",), ("dv",)),
            ("grad", "MatMul", ("dv", "a"), ("dw",)),
        ],
        outputs=("dw",),
    )
    assert simulate(viewed, {"b": 1}).peak_bytes == 5 * 1024  # a, v, dv and two in the loss


def test_an_output_no_step_reads_stays_until_the_step_ends() -> None:
    # ORT plans no release for an output without readers (Dropout's mask here): it is held
    # until the step's frame goes, so it is live at the YieldOp.
    masked = node_graph(
        [
            ("drop", "Dropout", ("x",), ("d", "mask")),
            ("mm", "MatMul", ("d", "w"), ("c",)),
            ("yield", "YieldOp", ("c",), ("dc",)),
            ("mm_grad", "MatMul", ("dc", "d"), ("dw",)),
        ],
        outputs=("dw",),
    )
    assert simulate(masked, {"b": 1}).peak_bytes == 6 * 1024  # d, mask, c, dc and two in the loss


def test_an_activation_writes_in_place_only_over_the_same_shape() -> None:
    def relu_after_gelu(wide: frozenset[str]) -> tuple[str, ...]:
        graph = node_graph(
            [
                ("gelu", "Gelu", ("x",), ("a",)),
                ("relu", "Relu", ("a",), ("r",)),
                ("mm", "MatMul", ("r", "w"), ("c",)),
                ("yield", "YieldOp", ("c",), ("dc",)),
            ],
            wide=wide,
        )
        program = _program(graph, (), AnalysisOrder.FILE)
        return program.allocations[1]  # what the Relu allocates

    assert relu_after_gelu(frozenset()) == ()  # a dies at the Relu: r takes its buffer
    assert relu_after_gelu(frozenset({"r"})) == ("r",)  # shapes differ: ORT allocates


def test_simulator_memoises_and_honours_counts() -> None:
    simulator = ActivationSimulator(STEP, {"Gelu+:1:-1": (Recompute("gelu", ("gelu",)),)})
    full = simulator.timeline({"b": 1}, ["Gelu+:1:-1"])
    assert simulator.timeline({"b": 1}, ["Gelu+:1:-1"]) is full
    assert simulator.timeline({"b": 1}, ["Gelu+:1:-1"], {"Gelu+:1:-1": 0}).peak_bytes == 5 * 1024


def test_on_cuda_every_buffer_goes_through_pytorchs_caching_allocator() -> None:
    # Hand-worked from PyTorch's rules: at b=1 every tensor is 1 KiB (small pool, 2 MiB
    # segments). After the warm-up step the loop still holds the last step's c when the next
    # c is made; at the YieldOp: a, c, the old c until the loop drops it, dc, then the loss's
    # two copies of c: 5 KiB allocated at most, in one small segment.
    small = simulate(STEP, {"b": 1}, device="cuda")
    assert (small.peak_bytes, small.resident_bytes, small.reserved_bytes) == (5 * 1024, 5 * 1024, 2 * 2**20)
    # At b=2048 each tensor is 2 MiB: the large pool, whose first request below 10 MiB gets a
    # 20 MiB segment that every later one is split from.
    large = simulate(STEP, {"b": 2048}, device="cuda")
    assert (large.resident_bytes, large.reserved_bytes) == (10 * 2**20, 20 * 2**20)
    # On CPU the same step's figure is ORT's arena's pages, and nothing is reserved.
    assert simulate(STEP, {"b": 2048}).reserved_bytes == 0.0


def _pool(*blocks: tuple[int, BlockUse]) -> CudaSetup:
    """One 20 MiB large segment as a trial left it, its blocks of MiB sizes in address order."""
    return CudaSetup(pool=PoolLayout((PoolSegment(False, tuple(PoolBlock(m * MiB, use) for m, use in blocks)),)))


def test_on_cuda_the_step_fits_around_what_lives_in_the_pool() -> None:
    # STEP at b=2048: 2 MiB tensors, at most 5 live (10 MiB), as worked out above. With 8 MiB
    # held for good at the front of a 20 MiB segment, the 12 MiB after it takes the step: 18
    # MiB allocated at most, nothing more reserved.
    roomy = simulate(STEP, {"b": 2048}, device="cuda", cuda=_pool((8, BlockUse.RESIDENT), (12, BlockUse.FREE)))
    assert (roomy.resident_bytes, roomy.reserved_bytes) == (18 * MiB, 20 * MiB)
    # With 12 MiB held, 8 MiB is too little: a second 20 MiB segment (its first request is
    # under 10 MiB), 22 MiB allocated at most.
    tight = simulate(STEP, {"b": 2048}, device="cuda", cuda=_pool((12, BlockUse.RESIDENT), (8, BlockUse.FREE)))
    assert (tight.resident_bytes, tight.reserved_bytes) == (22 * MiB, 40 * MiB)
    # The last step's c, held by the loop, is the pool's loop block: dropped at the first
    # yield, it is the old c of the worked-out peak, so the figures are the roomy ones.
    held = _pool((8, BlockUse.RESIDENT), (2, BlockUse.LOOP), (10, BlockUse.FREE))
    assert simulate(STEP, {"b": 2048}, device="cuda", cuda=held).resident_bytes == 18 * MiB
    # The live activations are the step's alone.
    assert roomy.peak_bytes == tight.peak_bytes == 10 * MiB


def test_the_simulator_plays_the_device_it_was_made_for() -> None:
    cuda = ActivationSimulator(STEP, {}, device="cuda").timeline({"b": 2048})
    assert cuda.reserved_bytes == 20 * 2**20


def test_constants_sit_in_the_arena_from_the_start() -> None:
    # ORT saves the graph's initializers into its arena as it builds the session: the pages
    # of w (1 KiB here) are held from before the first step, and never given back.
    without = simulate(STEP, {"b": 1})
    with_constant = simulate(replace(STEP, initializers=("w",)), {"b": 1})
    assert with_constant.resident_bytes - without.resident_bytes == 1024
    assert with_constant.peak_bytes == without.peak_bytes  # the live activations are the same


def _gpt_sample(device: str = "cpu") -> tuple[ActivationSimulator, list[PlanKey], dict[str, int], Timeline]:
    """The 1.19.2 GPT's execution graph at 64 for every dim: a simulator, every plan, the dims,
    and the step with every plan on as a fresh simulation gives it."""
    graph = load_graph(SAMPLES / "graphs" / "1.19.2" / "gpt.onnx")
    report = scan_graph(graph, "1.19.2")
    plans = plan_savings(report, graph)
    dims = {symbol: 64 for symbol in report.symbols}
    fresh = simulate(graph, dims, [r for plan in plans for r in plan.recomputes], device=device)
    return (
        simulator_for(plans, graph, None, OrtVersion.parse("1.19.2"), device),
        [plan.key for plan in plans],
        dims,
        fresh,
    )


def test_a_plays_bounds_grow_to_its_figure_and_a_stopped_play_resumes_alike() -> None:
    # Each bound is the figure or under it, none looser than the one before; the last is the
    # figure a fresh simulation gives, and a play stopped after its first bound and finished
    # later gives the same timeline.
    simulator, every, dims, fresh = _gpt_sample()
    bounds = list(simulator.resident_bounds(dims, every))
    assert len(bounds) >= 3 and bounds == sorted(bounds)
    assert bounds[-1] == fresh.resident_bytes
    stopped, _, _, _ = _gpt_sample()
    next(iter(stopped.resident_bounds(dims, every)))
    assert stopped.timeline(dims, every) == fresh
    # A play resumed by a second question starts from the steps it has played.
    again, _, _, _ = _gpt_sample()
    first = again.resident_bounds(dims, every)
    next(first), next(first)
    resumed = list(again.resident_bounds(dims, iter(every)))  # any iterable of plans, read once
    assert resumed[0] > bounds[0] and resumed[-1] == fresh.resident_bytes


def test_on_cuda_the_bounds_are_the_live_peak_then_the_figure() -> None:
    simulator, every, dims, fresh = _gpt_sample("cuda")
    bounds = list(simulator.resident_bounds(dims, iter(every)))
    # The figure the memory model predicts from on CUDA is what the allocator reserved.
    assert bounds == [fresh.peak_bytes, fresh.reserved_bytes] and bounds == sorted(bounds)
    assert fresh.held_bytes == fresh.reserved_bytes > fresh.resident_bytes


def test_bounds_paused_while_another_caller_finishes_the_play_end_at_the_figure() -> None:
    # The two-thread race below, in one thread and in its worst order: the bounds' reader waits
    # at a yield while the config's timeline is asked for, which finishes the shared play. The
    # reader must still end at the step's figure, not at the bound it held.
    _, every, dims, fresh = _gpt_sample()
    asked, _, _, _ = _gpt_sample()
    bounds = asked.resident_bounds(dims, every)
    held = [next(bounds), next(bounds)]
    assert held[-1] < fresh.resident_bytes  # still a bound: the play is not over
    assert asked.timeline(dims, every) == fresh
    assert list(bounds)[-1:] == [fresh.resident_bytes]


def test_two_threads_asking_about_one_config_get_the_fresh_figure() -> None:
    # The tune screen asks from its thread while the tuner's worker plans: a play stopped after
    # its first bound is resumed by one thread reading its bounds and by another asking for the
    # config's timeline, the interpreter switching between them as often as it can.
    _, every, dims, fresh = _gpt_sample()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(4):
            asked, _, _, _ = _gpt_sample()
            bounds = asked.resident_bounds(dims, every)
            next(bounds)
            assert _in_two_threads(bounds, asked, dims, every) == {"bounds": fresh.resident_bytes, "timeline": fresh}
    finally:
        sys.setswitchinterval(interval)


def _in_two_threads(
    bounds: Iterator[float], simulator: ActivationSimulator, dims: dict[str, int], plans: list[PlanKey]
) -> dict[str, object]:
    """The last of ``bounds`` read in one thread while another asks for the config's timeline."""
    results: dict[str, object] = {}
    threads = [
        threading.Thread(target=lambda: results.update(bounds=list(bounds)[-1])),
        threading.Thread(target=lambda: results.update(timeline=simulator.timeline(dims, plans))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_fits_and_max_batch_answer_as_the_exact_peak_does() -> None:
    # fits() stops a play once the answer is known: it must agree with the full play's peak at
    # every limit, on a model that has simulated nothing yet.
    graph = load_graph(SAMPLES / "graphs" / "1.19.2" / "gpt.onnx")
    report = scan_graph(graph, "1.19.2")
    plans = plan_savings(report, graph)
    symbols = require_batch_dim(report, "gpt")
    fixed = {symbol: 64 for symbol in report.symbols if symbol not in symbols}

    def model() -> MemoryModel:
        simulator = simulator_for(plans, graph, None, OrtVersion.parse("1.19.2"), "cpu")
        observations = [Observation(8, (), 600 * MiB), Observation(32, (), 900 * MiB)]
        return fit_memory_model(observations, plans, symbols, fixed, simulator=simulator)

    exact, every = model(), [plan.key for plan in plans]
    for selection in ((), tuple(every)):
        peaks = {batch: exact.peak(batch, selection) for batch in (8, 32)}
        for limit in sorted({*peaks.values(), *(p - 1 for p in peaks.values()), *(p * 0.97 for p in peaks.values())}):
            fresh = model()
            assert [fresh.fits(batch, selection, limit) for batch in peaks] == [p <= limit for p in peaks.values()]
        limit = peaks[32]
        fresh, answer = model(), model().max_batch(limit, selection)
        # The answer fits and the batch above it does not; the live bytes that rule batches out
        # without a play grow with the batch and are never over the peak.
        assert exact.peak(answer, selection) <= limit < exact.peak(answer + 1, selection)
        floors = [fresh.floor(batch, selection) for batch in range(1, 2 * answer + 2)]
        assert floors == sorted(floors)
        assert all(floor <= exact.peak(batch, selection) for batch, floor in enumerate(floors, start=1))


def test_a_pytorch_output_the_loop_holds_is_not_looked_for_in_the_arena() -> None:
    # A PythonOp's output (PyTorch's) read by the YieldOp is held into the next step, but the
    # arena never placed it.
    graph = training_graph(
        node("Relu", ["x"], ["a"]),
        node("PythonOp", ["a"], ["y"], domain=MS),
        yield_op("y"),
        node("PythonOpGrad", ["dy"], ["da"], domain=MS),
        node("ReluGrad", ["da", "a"], ["dx"], domain=MS),
    )
    on_cpu = simulate(graph, {"batch": 4})
    assert on_cpu.resident_bytes > 0 and on_cpu.peak_bytes > 0


def test_the_cycle_collector_is_on_again_after_a_simulation_that_failed() -> None:
    def failing() -> None:
        assert not gc.isenabled()
        raise ValueError("stop")

    assert gc.isenabled()
    with pytest.raises(ValueError):
        _without_cyclic_gc(failing)()
    assert gc.isenabled()


def test_where_takes_two_selections_from_the_arena_before_its_output() -> None:
    # ORT's CPU Where selects X where the condition holds and Y where it does not into two
    # tensors of their broadcast shapes, then merges them into its output: at the Where, the
    # X selection (64 bytes per sample), the Y selection (64 bytes) and the output are live.
    graph = training_graph(
        node("Where", ["m", "x", "y"], ["w"]),
        node("ReduceSum", ["w"], ["l"]),
        yield_op("l"),
        tensors={"m": (TensorProto.BOOL, (1, 16)), "y": (TensorProto.FLOAT, ()), "l": (TensorProto.FLOAT, ())},
        inputs=("x", "m", "y"),
    )
    program = _program(graph, (), AnalysisOrder.FILE)
    scratch = program.allocations[0][:2]
    assert program.allocations[0][2:] == ("w",)
    assert [program.buffers[number] for number in program.numbers_released[0]] == [
        *reversed(scratch)
    ]  # the Y selection freed first
    timeline = simulate(graph, {"batch": 8})
    assert (timeline.peak_op, timeline.peak_bytes) == ("Where", 64 * 8 + 64 + 64 * 8)
    assert simulate(graph, {"batch": 8}, device="cuda").peak_bytes == 64 * 8 + 4  # w and l: CUDA's Where takes none


def test_a_variadic_sum_folds_through_one_temporary_and_biasgelu_takes_its_own_after_the_output() -> None:
    graph = training_graph(
        node("Sum", ["a", "b", "c"], ["s"]),
        node("BiasGelu", ["s", "bias"], ["g"], domain=MS),
        node("ReduceSum", ["g"], ["l"]),
        yield_op("l"),
        tensors={"bias": (TensorProto.FLOAT, (16,)), "l": (TensorProto.FLOAT, ())},
        inputs=("a", "b", "c", "bias"),
    )
    program = _program(graph, (), AnalysisOrder.FILE)
    summed, biased = program.allocations[:2]
    assert len(summed) == 2 and summed[1] == "s"  # a + b into a temporary, then that + c into s
    assert len(biased) == 2 and biased[0] == "g"  # X + B into a float buffer after the output
    # At the Sum: the temporary and s; at the BiasGelu: s, g and X + B.
    sizes = _Sizes(program, {"batch": 4}, _SizesAt())
    assert sizes.known(summed[0]) == sizes.known(biased[1]) == 64 * 4
    assert simulate(graph, {"batch": 4}).peak_bytes == 3 * 64 * 4


def test_a_kernels_heap_scratch_counts_at_its_step_only() -> None:
    # LayerNormalizationGrad's CPU kernel builds four Eigen arrays the size of X on the heap:
    # outside the arena, live while it runs.
    graph = training_graph(
        node("LayerNormalization", ["x", "scale"], ["y", "mean", "inv_std"], axis=-1),
        node("ReduceSum", ["y"], ["l"]),
        yield_op("l"),
        node("Expand", ["dl", "shape"], ["dy"]),
        node("LayerNormalizationGrad", ["dy", "x", "scale", "mean", "inv_std"], ["dx", "dscale", "dbias"], domain=MS),
        tensors={
            "scale": (TensorProto.FLOAT, (16,)),
            "mean": (TensorProto.FLOAT, ("batch", 1)),
            "inv_std": (TensorProto.FLOAT, ("batch", 1)),
            "l": (TensorProto.FLOAT, ()),
            "dl": (TensorProto.FLOAT, ()),
            "shape": (TensorProto.INT64, (2,)),
            "dscale": (TensorProto.FLOAT, (16,)),
            "dbias": (TensorProto.FLOAT, (16,)),
        },
        inputs=("x", "scale", "shape"),
    )
    program = _program(graph, (), AnalysisOrder.FILE)
    grad = len(program.steps) - 1
    assert not any(name in program.scratch for name in program.allocations[grad])  # none in the arena
    assert _transients(program, _Sizes(program, {"batch": 64}, _SizesAt())) == {
        grad: 4 * 4096,
        program.yield_index: 0.0,
    }
    timeline = simulate(graph, {"batch": 64})
    assert timeline.peak_op == "LayerNormalizationGrad"
    # mean and inv_std (256 bytes each), dy, dx and four arrays of X's size (4 KiB each), the
    # two 64-byte parameter gradients, and the 4-byte l and dl PyTorch holds.
    assert timeline.peak_bytes == 2 * 256 + 6 * 4096 + 2 * 64 + 2 * 4


def test_a_dim_named_by_an_expression_takes_its_value() -> None:
    # ORT's shape inference names a language model's flattened, shifted logits by an
    # expression of the input dims; sized as one row, an in-graph loss's buffers vanish.
    graph = training_graph(
        node("Gelu", ["x"], ["h"], domain=MS),
        node("Reshape", ["h", "shape"], ["flat"]),
        node("Gelu", ["flat"], ["g"], domain=MS),
        node("ReduceSum", ["g"], ["l"]),
        yield_op("l"),
        tensors={
            "x": (TensorProto.FLOAT, ("batch", "seq", 16)),
            "h": (TensorProto.FLOAT, ("batch", "seq", 16)),
            "flat": (TensorProto.FLOAT, ("batch*(seq - 1)", 16)),
            "g": (TensorProto.FLOAT, ("batch*(seq - 1)", 16)),
            "shape": (TensorProto.INT64, (2,)),
            "l": (TensorProto.FLOAT, ()),
        },
        inputs=("x", "shape"),
    )
    # At the second Gelu: h (= flat, a view) and g, 2 × 5 × 16 floats and 2 × 4 × 16.
    assert simulate(graph, {"batch": 2, "seq": 5}).peak_bytes == 4 * (2 * 5 * 16 + 2 * 4 * 16)


def test_a_configs_scratch_never_takes_another_configs_size() -> None:
    # Sizes at some dims are shared by every config: a recomputed Where's selections and a Sum's
    # temporary must not share a name when the clone moves the Sum's position.
    graph = training_graph(
        node("Where", ["m", "x", "y"], ["w"], name="where"),
        node("Mul", ["w", "w"], ["o"]),
        yield_op("o"),
        node("Sum", ["q", "r", "w"], ["s"], name="sum"),
        node("ReduceSum", ["s"], ["ds"]),
        tensors={
            "m": (TensorProto.BOOL, ("batch", 1)),
            "x": (TensorProto.FLOAT, ()),
            "y": (TensorProto.FLOAT, ()),
            **{name: (TensorProto.FLOAT, ("batch", 1)) for name in ("w", "o", "do", "ds")},
            **{name: (TensorProto.FLOAT, ("batch", 1024)) for name in ("q", "r", "s")},
        },
        inputs=("m", "x", "y", "q", "r"),
    )
    plans = {PlanKey("Where+:1:-1"): (Recompute("where", ("where",)),)}
    fresh = ActivationSimulator(graph, plans).timeline({"batch": 64})
    shared = ActivationSimulator(graph, plans)
    shared.timeline({"batch": 64}, [PlanKey("Where+:1:-1")])
    assert shared.timeline({"batch": 64}) == fresh


def test_a_dim_expression_never_counts_below_zero_and_unknown_names_count_one() -> None:
    graph = node_graph([("gelu", "Gelu", ("x",), ("a",)), ("yield", "YieldOp", ("a",), ("da",))])
    sizes = _Sizes(_program(graph, (), AnalysisOrder.FILE), {"seq": 1, "batch": 4}, _SizesAt())
    assert sizes._dim("seq - 2") == 0.0
    assert sizes._dim("batch*(unknown - 1)") == 1.0
    assert sizes._dim("batch*(seq + 1)") == 8.0
    assert sizes._dim("not an (expression") == 1.0


def test_the_gradients_pytorch_hands_back_live_until_the_backward_returns() -> None:
    # ORTModule's backward holds its grad_outputs (here dc, read by the first backward node
    # only) until ORT's backward returns.
    graph = node_graph(
        [
            ("gelu", "Gelu", ("x",), ("a",)),
            ("mm", "MatMul", ("a", "w"), ("c",)),
            ("loss", "ReduceMean", ("c",), ("l",)),
            ("yield", "YieldOp", ("l", "c"), ("dl", "dc")),
            ("mm_grad", "MatMul", ("dc", "w"), ("da",)),
            ("gelu_grad", "GeluGrad", ("da", "x"), ("dx",)),
        ],
        outputs=("dx",),
        scalars=frozenset({"l", "dl"}),
    )
    program = _program(graph, (), AnalysisOrder.FILE)
    last = [program.buffers[number] for number in program.numbers_released[-1]]
    assert "dc" in last and "dl" in last
    timeline = simulate(graph, {"b": 1})
    # At gelu_grad: c (the loop's), dc (PyTorch's), da and dx, 1 KiB each, and l and dl.
    assert (timeline.peak_node, timeline.peak_bytes) == ("gelu_grad", 4 * 1024 + 2 * 4)


@pytest.mark.parametrize("order", list(AnalysisOrder))
def test_a_clone_whose_output_name_the_graph_already_uses_is_still_played(order: AnalysisOrder) -> None:
    """ORT names a clone's outputs <name>_recompute; a graph that already has such a tensor
    (one recomputed before, say) plays as it did: the name keeps its first buffer."""
    graph = node_graph(
        [
            ("gelu", "Gelu", ("x",), ("a",)),
            ("other", "Relu", ("x",), ("a_recompute",)),
            ("mm", "MatMul", ("a", "a_recompute"), ("c",)),
            ("yield", "YieldOp", ("c",), ("dc",)),
            ("mm_grad", "MatMul", ("dc", "a"), ("dw",)),
        ],
        outputs=("dw",),
    )
    timeline = simulate(graph, {"b": 1}, [Recompute("gelu", ("gelu",))], order=order)
    assert timeline.peak_bytes == 5120.0


def test_a_clone_named_as_a_graph_output_or_constant_no_node_names_is_that_tensor() -> None:
    """A graph output and an initializer that no node names, named as a clone's output: the
    clone's buffer lives to the end of the step as a graph output's does, and ORT saves the
    constant into the arena."""
    named = "a1_recompute"
    graph = replace(TWO_LAYERS, graph_outputs=(*TWO_LAYERS.graph_outputs, named), initializers=(named,))
    program = _program(graph, [Recompute("gelu1", ("gelu1",))], AnalysisOrder.FILE)
    # What the last step's reads release first, then what is left: the graph outputs.
    assert [program.buffers[number] for number in program.numbers_released[-1]] == ["dh", "dc", named, "dx"]
    assert program.constants == (named,)


def test_a_clone_named_as_a_tensor_a_view_reads_is_refused_in_one_line() -> None:
    """A view of a graph tensor named as a clone's output: the name's buffer would be released
    where none was allocated, so the simulation refuses the graph instead of playing it."""
    graph = node_graph(
        [
            ("gelu", "Gelu", ("x",), ("a",)),
            ("same", "Identity", ("a",), ("a_recompute",)),
            ("yield", "YieldOp", ("x",), ("dx",)),
            ("gelu_grad", "Gelu", ("dx",), ("g",)),
            ("view", "Reshape", ("a_recompute",), ("v",)),
            ("mm_grad", "MatMul", ("dx", "a"), ("da",)),
            ("add", "Add", ("v", "g"), ("s",)),
        ],
        outputs=("da", "s"),
    )
    with pytest.raises(ValueError, match="releases 'a_recompute', which it never allocated"):
        simulate(graph, {"b": 1}, [Recompute("gelu", ("gelu",))], AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST)


def test_a_graph_whose_node_orders_are_not_their_positions_is_refused() -> None:
    graph = replace(TWO_LAYERS, nodes=tuple(replace(node, order=node.order + 1) for node in TWO_LAYERS.nodes))
    with pytest.raises(ValueError, match="numbered by their position"):
        simulate(graph, {"b": 1})


def test_the_largest_buffer_is_the_arenas_not_pytorchs() -> None:
    # a1 and a2 (4 KiB per sample) are the arena's widest; a gradient the YieldOp hands back is
    # PyTorch's and does not count, however wide.
    assert ActivationSimulator(TWO_LAYERS, {}).largest_buffer({"b": 2}) == 8 * 1024
    wide_gradient = node_graph(STEP_NODES, outputs=("dw",), wide=frozenset({"dc"}))
    assert ActivationSimulator(wide_gradient, {}).largest_buffer({"b": 2}) == 2 * 1024
    # the GPT sample's at 64: no buffer of the step is larger, and the step holds it
    simulator, _, dims, _ = _gpt_sample()
    largest = simulator.largest_buffer(dims)
    assert 0 < largest <= simulator.live_bytes(dims)
