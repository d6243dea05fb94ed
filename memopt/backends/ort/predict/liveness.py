"""Activation memory of one training step, simulated on the training graph at given dims.

The execution training graph is walked in the order ORT runs it: without a config the
saved file's order (ORT's default), with one the release's own order (1.18 and later: the
memory-efficient sort, ``memopt.backends.ort.graph.topology``). Every node's outputs are allocated
when it runs and freed after their last consumer; graph outputs (the gradients) stay until
the step ends, and the model's outputs (the YieldOp's inputs) stay with the training loop
until the next step's forward returns. A recompute config is applied the way ORT's memory
optimizer rewrites the graph: each recomputed subgraph is cloned, its backward consumers
read the clone, and the original is freed after its last forward use.

What ORT's allocator adds is modelled where it is structural:
- view ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity, ExpandDims) share their
  input's buffer, so they allocate nothing and keep that buffer alive;
- element-wise ops write into an input that dies at them when sizes match (ORT's
  planner reuses the buffer), so that step holds one copy, not two;
- at the YieldOp, PyTorch computes the loss on the yielded outputs unless the model
  returned its own (a scalar among them): two copies of the largest (a cross-entropy's
  log-softmax and its gradient) are live there, outside ORT's arena, as are the gradients
  PyTorch hands back (the YieldOp's outputs), held by ORTModule's backward until it returns;
- on CPU, what a kernel takes for itself while it runs: arena buffers (``Where``'s two
  selections, a variadic ``Sum``'s temporary, ``BiasGelu``'s X + B…) placed before or after
  its outputs as the kernel takes them, and heap buffers (the cross-entropy's shifted
  logits, ``LayerNormalizationGrad``'s arrays) held outside the arena at that step.
The same allocations and frees, played through the device's allocator over several steps,
give ``resident_bytes``, what a trial's peak reads and the memory model predicts from. On CPU
that allocator is ORT's BFC arena (``memopt.backends.ort.predict.arena``) and the figure the pages it
handed out, which is what the process holds. On CUDA it is PyTorch's caching allocator
(``memopt.cuda_caching``): ORTModule hands ORT's allocations to it, so PyTorch's loss
and the gradients it hands back go through it too; ``resident_bytes`` is its peak of allocated
bytes after the warm-up step (``torch.cuda.max_memory_allocated``), and ``reserved_bytes`` its
peak of reserved segments (``max_memory_reserved``), what the device holds for it and what
the memory model predicts from there (``Timeline.held_bytes``). What already lives in the pool
(weights, optimizer state) is placed first where a trial's pool layout is known.

The work is split by what it depends on: a config's schedule and how each output gets its
buffer (a ``_Program``) do not depend on the dims, so a config is scheduled once for every
batch; the tensors' sizes at some dims serve every config; a play at some dims walks the
program once for its events, then the arena step by step, and stops early once the arena's
placement repeats itself (the steps after it touch nothing new).
"""

from __future__ import annotations

import functools
import gc
import math
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import NamedTuple, ParamSpec, TypeVar

import numpy as np
from onnx import TensorProto

from memopt.backends.ort.config import PlanKey
from memopt.backends.ort.graph.runs import Runs
from memopt.backends.ort.graph.topology import memory_efficient_backward, memory_efficient_order
from memopt.backends.ort.graph.training_graph import Dim, Node, TensorInfo, TrainingGraph
from memopt.backends.ort.logparse import ArenaGrowth
from memopt.backends.ort.predict.arena import ALLOCATE, FREE, BFCArena
from memopt.backends.ort.predict.program_kernel import assign_buffers
from memopt.backends.ort.rules import AnalysisOrder
from memopt.backends.ort.scan.detect import element_size
from memopt.backends.ort.scan.modules import module_path
from memopt.cuda_caching import BlockUse, CudaSetup
from memopt.graph.expr import ExpressionError, parse_expression

__all__ = ["RECOMPUTED_SUFFIX", "ActivationSimulator", "Recompute", "Timeline", "simulate"]

RECOMPUTED_SUFFIX = "_recompute"  # ORT names a node's recomputed clone <node>_recompute

_VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "ExpandDims"})
# Ops whose kernels ORT lets write into their first input (MayInplace(0, 0)), per device. On
# CPU only the unary activations declare it (onnxruntime/core/providers/cpu/activation/
# activations.cc); Add, Mul, Dropout and the rest allocate their output, as the CPU arena's
# growth on a base-size BERT shows request by request. CUDA's element-wise kernels declare it.
_IN_PLACE_CPU = frozenset(
    {"Elu", "HardSigmoid", "LeakyRelu", "Relu", "Selu", "Sigmoid", "Softplus", "Softsign", "Tanh", "ThresholdedRelu"}
)
_IN_PLACE_CUDA = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Relu",
        "Gelu",
        "FastGelu",
        "BiasGelu",
        "GeluGrad",
        "BiasGeluGrad_dX",
        "Dropout",
        "BitmaskDropout",
        "DropoutGrad",
        "BitmaskDropoutGrad",
        "Where",
        "Cast",
        "Softmax",
        "SoftmaxGrad_13",
        "Sigmoid",
        "Tanh",
        "Neg",
        "Sqrt",
        "Pow",
    }
)
_CONCATS = frozenset({"Concat", "ConcatTraining"})
_TORCH_KERNELS = frozenset({"ATen", "PythonOp", "PythonOpGrad"})
_SCALAR_BYTES = 8  # a loss: one float or double
_MEMORY_EFFICIENT = (AnalysisOrder.MEMORY_EFFICIENT, AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST)
# Training steps played through the arena. Its placement drifts from step to step (the
# training loop holds the last step's outputs into the next forward), and the pages it
# touched grow for a few steps, now and then after a quiet one, before they settle: measured
# per mapping on CPU RSS, settled by the fourth or fifth step; simulated, by the fifth.
_ARENA_STEPS = 8
# Where the real arena has been seen to settle earliest: a Hugging Face Llama's pages were all
# touched by the end of its second step, where the simulated arena went on to place one
# logits-sized buffer on new pages in its third (bench/arena_pages.py). The figure after this
# many steps is the play's early reading (``Timeline.early_resident_bytes``).
_EARLY_STEPS = 2
# What a simulator keeps of its work besides timelines, each as large as the graph: the
# tensor sizes at this many dims, the programs of this many configs (a search asks for one
# config at many batches, or for many configs at one batch).
_SIZES_KEPT = 4
_PROGRAMS_KEPT = 4
_PLAYS_KEPT = 4


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _without_cyclic_gc(work: Callable[_P, _R]) -> Callable[_P, _R]:
    """``work`` with Python's cycle collector paused. A simulation makes millions of small
    objects, none in a cycle (reference counting frees them), and the collector, triggered by
    their number, walks every object alive each time: the graph, the programs kept. Paused, a
    96-layer plan takes about a quarter less CPU time."""

    @functools.wraps(work)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not gc.isenabled():
            return work(*args, **kwargs)
        gc.disable()
        try:
            return work(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@dataclass(frozen=True)
class Recompute:
    """One recomputed subgraph: its nodes in topological order, the entry node last."""

    entry: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Timeline:
    """The simulated step: its activation peak and where it happens."""

    peak_bytes: float
    peak_node: str  # the node running at the peak ("" for an empty graph)
    peak_op: str
    phase: str  # "forward", "loss" (at the YieldOp) or "backward"
    module: str | None  # the torch module of the node at the peak, when its name tells
    recomputed_at_peak: bool  # the node at the peak is a recompute clone
    step_count: int
    # What a trial's peak reads of the repeated steps: on CPU the arena's high-water mark, the
    # pages it handed out (see arena.py); on CUDA the caching allocator's peak allocated bytes.
    resident_bytes: float = 0.0
    reserved_bytes: float = 0.0  # CUDA: the caching allocator's peak reserved bytes (0 on CPU)
    # CPU: ``resident_bytes`` as it stood after the first ``_EARLY_STEPS`` steps (the same where
    # the play settled sooner; on CUDA the same as ``held_bytes``): the pages a real arena that
    # settles early would hold. The memory model may fit on it (``MemoryModel.early_arena``).
    early_resident_bytes: float | None = None
    # CPU: the regions the arena added for the constants then over the steps played, in order:
    # what ORT logs at DEVINFO when it extends.
    arena_growth: tuple[ArenaGrowth, ...] = ()
    device: str = "cpu"  # whose allocator played the step

    @property
    def held_bytes(self) -> float:
        """What the device's allocator holds at its peak, the figure the memory model predicts
        from: on CUDA the reserved segments (what runs out on the card, allocated or cached),
        on CPU the arena's pages (``resident_bytes``)."""
        return self.reserved_bytes if self.device == "cuda" else self.resident_bytes

    @property
    def early_held_bytes(self) -> float:
        """``held_bytes`` read after the play's first steps (see ``early_resident_bytes``)."""
        if self.device == "cuda" or self.early_resident_bytes is None:
            return self.held_bytes
        return self.early_resident_bytes

    def where(self) -> str:
        place = f" in {self.module}" if self.module else ""
        clone = " (recomputed)" if self.recomputed_at_peak else ""
        return f"{self.phase}{place}, at {self.peak_op}{clone}"


class _Step(NamedTuple):  # a tuple: a schedule makes one per node, for every config
    node: Node
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    recomputed: bool


def simulate(
    graph: TrainingGraph,
    dims: Mapping[str, int],
    recompute: Iterable[Recompute] = (),
    order: AnalysisOrder = AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST,
    device: str = "cpu",
    cuda: CudaSetup = CudaSetup(),
) -> Timeline:
    """The activation timeline of one training step of ``graph`` at ``dims`` with ``recompute``
    applied, a config running in the execution ``order`` of the release (``OrtRules.analysis_order``),
    its allocations played through ``device``'s allocator (on CUDA, set up as ``cuda`` says).

    A config is played in the release's order only: the arena's growth and its pages follow
    that order (a base-size GPT-2 with every plan on grows its arena region for region as
    ORT's log shows), and playing the file's order too, the larger figure kept, priced
    combined plans several times too low (BENCHMARKS.md, base-size models)."""
    return _simulate(_program(graph, tuple(recompute), order, device=device), dims, _SizesAt(), device, cuda)


def _program(
    graph: TrainingGraph,
    recompute: Sequence[Recompute],
    order: AnalysisOrder,
    base: _ScheduleBase | None = None,
    device: str = "cpu",
) -> _Program:
    """The config as ``simulate`` plays it (``base``: see ``_schedule``)."""
    return _Program(graph, *_schedule(graph, recompute, order, base), device, base.arrays if base else None)


@_without_cyclic_gc
def _simulate(
    program: _Program, dims: Mapping[str, int], known: _SizesAt, device: str, cuda: CudaSetup = CudaSetup()
) -> Timeline:
    """``program`` played at ``dims`` through ``device``'s allocator; ``known``: the tensors'
    sizes there, as far as known."""
    if device == "cuda":
        return _play_cuda(program, _Sizes(program, dims, known), cuda)
    return _play(program, _Sizes(program, dims, known))


class _GraphArrays:
    """A graph's nodes as numbers, for the array passes that build a program: each tensor name
    numbered, each node's inputs and outputs as runs (-1 for an absent one), and
    per node what its op is to ORT's planner. Made once per graph: every config's program
    reads them."""

    def __init__(self, graph: TrainingGraph) -> None:
        self.graph = graph
        nodes = graph.nodes
        if any(node.order != position for position, node in enumerate(nodes)):
            raise ValueError("a training graph's nodes are numbered by their position")
        number: dict[str, int] = {}
        for node in nodes:
            for name in chain(node.inputs, node.outputs):
                if name and name not in number:
                    number[name] = len(number)
        self.number = number
        self.names = list(number)
        self.inputs = self._numbered([node.inputs for node in nodes])  # -1 for an absent one
        self.outputs = self._numbered([node.outputs for node in nodes])
        op_types = [node.op_type for node in nodes]

        def flags(ops: frozenset[str]) -> np.ndarray:
            return np.fromiter((op in ops for op in op_types), bool, len(op_types))

        self.view, self.torch_kernel, self.scratch_kernel = (
            flags(_VIEWS),
            flags(_TORCH_KERNELS),
            flags(_SCRATCH_KERNELS),
        )
        self.in_place = {"cpu": flags(_IN_PLACE_CPU), "cuda": flags(_IN_PLACE_CUDA)}
        self.session_index = np.fromiter(map(graph.session_index, range(len(nodes))), np.int64, len(nodes))
        self._shape_numbers: dict[tuple[object, ...], int] = {}
        # Each tensor's shape (element type and dims) among those with every dim known, -1 for
        # none: sized once per shape at some dims, a deep model's tensors share a few dozen.
        sized: dict[tuple[int | None, tuple[Dim, ...]], int] = {}
        shape_of = []
        for info in map(graph.tensor, self.names):
            dims = _sizable_dims(info)
            shape_of.append(-1 if dims is None else sized.setdefault((info.elem_type, dims), len(sized)))
        self.sized = list(sized)
        self.sized_shape = np.array(shape_of, np.int64)

    def _numbered(self, names: list[tuple[str, ...]]) -> Runs:
        number = self.number
        return Runs.of([[number[name] if name else -1 for name in run] for run in names])

    def shape_number(self, name: str) -> int:
        """What ORT's planner compares to reuse a buffer, as a number (equal shapes, equal
        numbers): element size and every dim, known or named; -1 where a dim is unknown or the
        tensor is a scalar (never reused)."""
        info = self.graph.tensor(name)
        if not info.dims or any(dim is None or dim == "" for dim in info.dims):
            return -1
        return self._shape_numbers.setdefault((element_size(info.elem_type) or 4, *info.dims), len(self._shape_numbers))

    @functools.cached_property
    def shapes(self) -> np.ndarray:
        """``shape_number`` of each tensor, by number."""
        return np.fromiter(map(self.shape_number, self.names), np.int64, len(self.names))


class _Program:
    """A schedule as its plays need it, worked out once for every dims: which buffers each step
    allocates and which it releases.

    Buffers are assigned as ORT's allocation planner assigns them
    (``onnxruntime/core/framework/allocation_planner.cc``), on tensor shapes, not sizes, so
    the assignment holds at every dims. Each output in turn:
    - PyTorch's (an ATen or PythonOp output, the gradients the YieldOp hands back) is not the
      arena's; a graph output (a gradient) gets a buffer of its own;
    - a view shares its input's buffer, and an op whose kernel allows it writes into its first
      input when that input's buffer has no other use left and the shapes are the same,
      unless the node's first consumer is the YieldOp (PyTorch gets that output);
    - otherwise it allocates. The planner could also hand it a dead buffer of the same shape,
      but ORTModule turns that off (``enable_mem_reuse = False`` in its session options), and
      the arena's growth, request for request, agrees.
    A buffer is released after the last step that reads a tensor sharing it; one no step reads
    (an unused output), a graph output and the model's outputs (held by the loop) live to the
    end of the step.

    A planner builds one per config it tries, over every step of the graph, so the work is
    done on numbers (``_GraphArrays``, ``arrays``): array passes, and the assignment as one
    compiled loop (``memopt.backends.ort.predict.program_kernel``)."""

    def __init__(
        self,
        graph: TrainingGraph,
        steps: list[_Step],
        yield_index: int | None,
        device: str,
        arrays: _GraphArrays | None = None,
    ) -> None:
        self.graph = graph
        self.steps = steps
        self.yield_index = yield_index
        self.arrays = arrays = arrays if arrays is not None else _GraphArrays(graph)
        count = len(steps)
        # Recomputed clones and the backward nodes rewired to read them name tensors of their
        # own; every other step is its node, whose numbers ``arrays`` holds.
        changed = [
            index
            for index, step in enumerate(steps)
            if step.recomputed or step.inputs is not step.node.inputs or step.outputs is not step.node.outputs
        ]
        self.aliases = {
            clone: original
            for step in map(steps.__getitem__, changed)
            if step.recomputed
            for original, clone in zip(step.node.outputs, step.outputs)
            if clone
        }
        known, new_names = arrays.number, dict[str, int]()

        def numbered(name: str) -> int:
            if not name:
                return -1
            found = known.get(name)
            return new_names.setdefault(name, len(known) + len(new_names)) if found is None else found

        orders = np.fromiter((step.node.order for step in steps), np.int64, count)
        input_start, input_ids = arrays.inputs.gather(orders)
        output_start, output_ids = arrays.outputs.gather(orders)
        recomputed = np.zeros(count, bool)
        for index in changed:
            step = steps[index]
            recomputed[index] = step.recomputed
            input_ids[input_start[index] : input_start[index + 1]] = list(map(numbered, step.inputs))
            output_ids[output_start[index] : output_start[index + 1]] = list(map(numbered, step.outputs))
        # What a kernel takes from the arena for itself while it runs, freed when it returns.
        self.scratch: dict[str, TensorInfo] = {}
        self.heap: list[tuple[str, ...]] = [()] * count  # per step, its kernel's scratch on the heap
        scratch_taken: list[tuple[int, int, int]] = []  # (step, before 0 or after 2 its outputs, number)
        scratch_freed: list[tuple[int, int]] = []  # (step, number), the order each step frees them in
        for index in np.flatnonzero(arrays.scratch_kernel[orders]).tolist() if device == "cpu" else ():
            step = steps[index]
            scratch = _scratch(graph, step, self.aliases)
            # Named by the node (its clone apart): sizes at some dims are shared by every config.
            node = f"{step.node.order}{'r' if step.recomputed else ''}"
            before, after, heap = (
                tuple(f"{_SCRATCH_PREFIX}{node}{place}{k}" for k in range(len(shapes)))
                for place, shapes in zip("bah", scratch)
            )
            self.scratch.update(zip((*before, *after, *heap), (*scratch.before, *scratch.after, *scratch.heap)))
            self.heap[index] = heap
            scratch_taken += [(index, 0, numbered(name)) for name in before]
            scratch_taken += [(index, 2, numbered(name)) for name in after]
            scratch_freed += [(index, numbered(name)) for name in (*reversed(after), *reversed(before))]
        yielded = steps[yield_index] if yield_index is not None else None
        handed_back = [numbered(name) for name in (yielded.outputs if yielded is not None else ()) if name]
        held = [numbered(name) for name in (set(yielded.inputs) if yielded is not None else ()) if name]
        graph_outputs = [
            numbered(name) for name in dict.fromkeys(graph.graph_outputs) if name in known or name in new_names
        ]
        tensors = len(known) + len(new_names)
        names = [*arrays.names, *new_names]
        is_scratch = np.zeros(tensors, bool)
        is_scratch[[number for _, _, number in scratch_taken]] = True
        output_steps = np.repeat(np.arange(count), np.diff(output_start))
        outputs = output_ids >= 0
        # PyTorch allocated an ATen or PythonOp output (its own kernel ran), and the YieldOp's
        # outputs, the gradients PyTorch hands back.
        from_torch = np.zeros(tensors, bool)
        from_torch[output_ids[outputs & arrays.torch_kernel[orders][output_steps]]] = True
        from_torch[handed_back] = True
        # Per tensor, the steps that read it, one entry per input slot, in step order.
        read = input_ids >= 0
        read_tensors = input_ids[read]
        read_steps = np.repeat(np.arange(count), np.diff(input_start))[read]
        reads = np.bincount(read_tensors, minlength=tensors)
        reader_start = np.zeros(tensors + 1, np.int64)
        np.cumsum(reads, out=reader_start[1:])
        reader_steps = read_steps[np.argsort(read_tensors, kind="stable")]
        # ORT's use counts decide only whether an op writes into its input, so a schedule
        # without such an op (on CPU, most: only unary activations may) counts none. Per
        # tensor: one per reading step, one for its definition (two for PyTorch's), one more
        # for what must outlive the step (graph outputs, held outputs).
        in_place = arrays.in_place["cuda" if device == "cuda" else "cpu"][orders]
        counting = bool(in_place.any())
        uses = reads.astype(np.int64)
        shapes = np.full(tensors, -1, np.int64)
        if counting:
            defined = output_ids[outputs]
            np.add.at(uses, defined, 1 + from_torch[defined])
            counted = (reads > 0) | np.bincount(defined, minlength=tensors).astype(bool)
            outliving = np.array([*graph_outputs, *held], np.int64)
            np.add.at(uses, outliving[counted[outliving]], 1)
            shapes[: len(known)] = arrays.shapes
            for name in new_names.keys() & self.aliases.keys():
                shapes[new_names[name]] = arrays.shape_number(self.aliases[name])
            for name in known.keys() & self.aliases.keys():  # a clone named as a tensor of the graph
                shapes[known[name]] = arrays.shape_number(self.aliases[name])
        not_shared = from_torch.copy()
        not_shared[graph_outputs] = True
        node_index = arrays.session_index[orders]
        clones = np.flatnonzero(recomputed)
        last = int(node_index[~recomputed].max()) if len(clones) < count else -1
        node_index[clones] = last + 1 + clones  # ORT adds the recomputed nodes after every other
        owner = np.full(tensors, -1, np.int64)
        assign_buffers(
            input_start,
            input_ids,
            output_start,
            output_ids,
            arrays.view[orders],
            in_place,
            uses,
            counting,
            not_shared,
            shapes,
            reader_start,
            reader_steps,
            node_index,
            -1 if yield_index is None else yield_index,
            owner,
        )
        # Per step, the buffers (numbered by the tensor that allocated each) it allocates, in
        # order, its kernel's scratch among them: before its outputs, then its outputs, then after.
        owns = outputs.copy()
        owns[outputs] = owner[output_ids[outputs]] == output_ids[outputs]
        taken = np.array(scratch_taken, np.int64).reshape(-1, 3)
        keys = np.concatenate([3 * output_steps[owns] + 1, 3 * taken[:, 0] + taken[:, 1]])
        order = np.argsort(keys, kind="stable")
        allocated = np.concatenate([output_ids[owns], taken[:, 2]])[order]
        # Buffers are numbered from 0 in the order allocated (a name allocated again, a clone's
        # output named as a tensor of the graph, keeps its number).
        distinct, first = np.unique(allocated, return_index=True)
        by_first = np.argsort(first)
        buffer_tensors = distinct[by_first]
        buffer_of = np.full(tensors, -1, np.int64)
        buffer_of[buffer_tensors] = np.arange(len(buffer_tensors))
        self.buffers = tuple(map(names.__getitem__, buffer_tensors.tolist()))
        self.allocation_steps = keys[order] // 3
        self.allocation_buffers = buffer_of[allocated]
        self.buffer_steps = tuple(self.allocation_steps[first[by_first]].tolist())
        self.torch_buffers = from_torch[buffer_tensors]
        # Per buffer, the graph tensor whose shape sizes it (a clone's original), -1 for none (a
        # kernel's scratch).
        graph_tensor = np.arange(tensors)
        graph_tensor[len(known) :] = -1
        for clone, original in self.aliases.items():
            graph_tensor[known[clone] if clone in known else new_names[clone]] = known.get(original, -1)
        self.buffer_sources = graph_tensor[buffer_tensors]
        # A buffer is released after the last step reading a tensor in it, unless it must
        # outlive the step; a step's kernel's scratch first, then in the order the buffers'
        # tensors are first read.
        owners = owner[read_tensors]
        in_arena = owners >= 0
        release = np.full(tensors, -1, np.int64)
        np.maximum.at(release, owners[in_arena], read_steps[in_arena])
        rank = np.full(tensors, len(owners), np.int64)
        np.minimum.at(rank, owners[in_arena], np.flatnonzero(in_arena))
        kept = np.zeros(tensors, bool)
        outlive = owner[np.array([*graph_outputs, *held, *handed_back], np.int64)]
        kept[outlive[outlive >= 0]] = True
        released = np.flatnonzero((release >= 0) & ~kept)
        released = released[np.argsort(rank[released], kind="stable")]
        freed = np.array(scratch_freed, np.int64).reshape(-1, 2)
        keys = np.concatenate([2 * freed[:, 0], 2 * release[released] + 1])
        order = np.argsort(keys, kind="stable")
        release_steps, release_tensors = keys[order] // 2, np.concatenate([freed[:, 1], released])[order]
        # What is left at the end of the step, in the order allocated: the last step releases
        # it, but the outputs the loop holds into the next step (``held_by_loop``).
        left = allocated[kept[allocated] | ((release[allocated] < 0) & ~is_scratch[allocated])]
        held_buffers = np.zeros(tensors, bool)
        held_owners = owner[np.array(held, np.int64)]
        held_buffers[held_owners[held_owners >= 0]] = True
        if count:
            stays = left[~held_buffers[left]]
            release_steps = np.concatenate([release_steps, np.full(len(stays), count - 1)])
            release_tensors = np.concatenate([release_tensors, stays])
        self.held_by_loop = tuple(buffer_of[left[held_buffers[left]]].tolist())
        self.release_steps = release_steps.astype(np.int64)
        self.release_buffers = buffer_of[release_tensors]
        if (self.release_buffers < 0).any():
            # A clone's output named as a tensor the graph already has, read through a view:
            # the name's buffer is released after the view, where neither allocated it.
            unallocated = names[int(release_tensors[np.argmax(self.release_buffers < 0)])]
            raise ValueError(f"the recomputed graph releases {unallocated!r}, which it never allocated")
        # The constants a step reads: ORT saves them into the arena as it builds the session.
        self.constants = tuple(
            name
            for name in graph.initializers
            if (found := known.get(name, new_names.get(name))) is not None and reads[found]
        )
        # The same events as one sequence, for the passes over a play's events: a step's
        # allocations then its releases, with where each step's allocations end in it.
        keys = np.concatenate([2 * self.allocation_steps, 2 * self.release_steps + 1])
        order = np.argsort(keys, kind="stable")
        self.event_buffers = np.concatenate([self.allocation_buffers, self.release_buffers])[order]
        self.event_signs = np.concatenate([np.ones(len(self.allocation_buffers)), -np.ones(len(self.release_buffers))])[
            order
        ]
        self.allocations_end = np.searchsorted(keys[order], 2 * np.arange(count), side="right")

    @functools.cached_property
    def numbers_allocated(self) -> list[tuple[int, ...]]:
        """Per step, the buffers it allocates, in order."""
        return self._per_step(self.allocation_steps, self.allocation_buffers)

    @functools.cached_property
    def numbers_released(self) -> list[tuple[int, ...]]:
        """Per step, the buffers released after it, in order; the last step also releases what
        is left but ``held_by_loop``."""
        return self._per_step(self.release_steps, self.release_buffers)

    @functools.cached_property
    def allocations(self) -> list[tuple[str, ...]]:
        """``numbers_allocated`` by the names of the tensors that allocated them."""
        return [tuple(map(self.buffers.__getitem__, numbers)) for numbers in self.numbers_allocated]

    def _per_step(self, steps: np.ndarray, buffers: np.ndarray) -> list[tuple[int, ...]]:
        ends = np.searchsorted(steps, np.arange(len(self.steps) + 1), side="left").tolist()
        numbers = buffers.tolist()
        return [tuple(numbers[start:end]) for start, end in zip(ends, ends[1:])]


_SCRATCH_PREFIX = "#scratch:"  # a kernel's scratch buffer, named after its node


class _Scratch(NamedTuple):
    """The buffers a CPU kernel takes from the arena while it runs, in the order it takes them:
    those before its outputs, then those after. It frees them as it returns, the last first.
    ``heap``: what it takes from the C++ heap meanwhile, outside the arena but in the process."""

    before: tuple[TensorInfo, ...] = ()
    after: tuple[TensorInfo, ...] = ()
    heap: tuple[TensorInfo, ...] = ()


_NO_SCRATCH = _Scratch()
_VARIADIC = frozenset({"Sum", "Min", "Max", "Mean"})
_BIAS_GELU = frozenset({"BiasGelu", "FastGelu"})
_BIAS_GELU_GRAD = frozenset({"BiasGeluGrad_dX", "BiasFastGeluGrad_dX"})
_CROSS_ENTROPY = frozenset({"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossInternal"})
_CROSS_ENTROPY_GRAD = frozenset({"SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternalGrad"})
_LAYER_NORM_GRAD = frozenset(
    {"LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad", "InvertibleLayerNormalizationGrad"}
)
# The op types ``_scratch`` knows a CPU kernel of that takes buffers for itself.
_SCRATCH_KERNELS = frozenset(
    {
        "Where",
        *_VARIADIC,
        *_BIAS_GELU,
        *_BIAS_GELU_GRAD,
        *_CROSS_ENTROPY,
        *_CROSS_ENTROPY_GRAD,
        *_LAYER_NORM_GRAD,
    }
)


def _scratch(graph: TrainingGraph, step: _Step, aliases: Mapping[str, str]) -> _Scratch:
    """What ``step``'s CPU kernel takes from the arena, as ORT 1.19's kernels do (sources under
    ``onnxruntime/core/providers/cpu``, ``contrib_ops/cpu`` and ``orttraining/training_ops/cpu``).
    Heap buffers (``std::vector``, Eigen's temporaries, MLAS's own) are not the arena's."""
    op_type, inputs = step.node.op_type, step.inputs

    def info(name: str) -> TensorInfo:
        return graph.tensor(aliases.get(name, name))

    output = info(step.outputs[0]) if step.outputs and step.outputs[0] else TensorInfo(None, None)
    if op_type == "Where" and len(inputs) == 3 and all(inputs):
        # where_op.cc: X where the condition holds, then Y where it does not, each into a tensor
        # of its broadcast shape, merged into the output.
        condition, *values = map(info, inputs)
        return _Scratch(
            before=tuple(TensorInfo(v.elem_type, _broadcast(condition.dims, v.dims, output.dims)) for v in values)
        )
    if op_type in _VARIADIC and len(inputs) >= 3 and (step.node.since_version or 8) >= 8:
        # element_wise_ops.cc, UntypedBroadcastVariadic: the inputs folded pairwise through
        # temporaries, the last pair into the output. With more than three inputs the next
        # temporary is taken before the one it reads is freed, and the output lands in the
        # freed one's place: at most two buffers live beside the inputs, as here.
        dims: tuple[Dim, ...] | None = info(inputs[0]).dims
        for name in inputs[1:-1]:
            dims = _broadcast(dims, info(name).dims, output.dims)
        return _Scratch(before=(TensorInfo(output.elem_type, dims),))
    if op_type in _BIAS_GELU and len(inputs) >= 2 and inputs[1]:
        # bias_gelu.cc: X + B into a float buffer taken after the output.
        return _Scratch(after=(TensorInfo(TensorProto.FLOAT, info(inputs[0]).dims),))
    if op_type in _BIAS_GELU_GRAD and len(inputs) >= 2:
        # activations_grad.cc: X + B, after dX.
        return _Scratch(after=(TensorInfo(TensorProto.FLOAT, info(inputs[1]).dims),))
    if op_type in _CROSS_ENTROPY and inputs:
        # softmax_cross_entropy_loss.cc: logits of rank > 2 transposed to (N, D1…, C) first;
        # the shifted logits in a std::vector, and the log-probabilities too when the node
        # does not output them.
        logits = info(inputs[0])
        heap = (TensorInfo(TensorProto.FLOAT, logits.dims),) * (1 if len(step.outputs) > 1 and step.outputs[1] else 2)
        return _Scratch(before=(logits,) if _rank(logits) > 2 else (), heap=heap)
    if op_type in _CROSS_ENTROPY_GRAD and len(inputs) >= 2 and _rank(info(inputs[1])) > 2:
        return _Scratch(after=(info(inputs[1]),))  # log_prob transposed back, after d_logit
    if op_type in _LAYER_NORM_GRAD and len(inputs) > 1 and inputs[1]:
        # layer_norm.cc (training): four Eigen arrays the size of X (Y for the invertible
        # one), live together.
        return _Scratch(heap=(info(inputs[1]),) * 4)
    return _NO_SCRATCH


def _rank(info: TensorInfo) -> int:
    return len(info.dims) if info.dims is not None else 0


def _broadcast(
    first: tuple[Dim, ...] | None, second: tuple[Dim, ...] | None, fallback: tuple[Dim, ...] | None
) -> tuple[Dim, ...] | None:
    """The shape numpy's broadcasting gives ``first`` and ``second``, named dims taken as
    neither 1 nor equal to another name; ``fallback`` where that cannot be told."""
    if first is None or second is None:
        return fallback
    width = max(len(first), len(second))
    shape: list[Dim] = []
    for a, b in zip((1,) * (width - len(first)) + first, (1,) * (width - len(second)) + second):
        if a == b or b == 1:
            shape.append(a)
        elif a == 1:
            shape.append(b)
        elif isinstance(a, int) != isinstance(b, int) and None not in (a, b):
            shape.append(a if isinstance(a, int) else b)  # a named dim broadcast against a number is that number
        else:
            return fallback
    return tuple(shape)


def _play(program: _Program, sizes: _Sizes) -> Timeline:
    """Run the program for several training steps through the arena: the live peak of one
    step, where it is, and the pages the arena touched by the end."""
    return _ArenaPlay(program, sizes).finish()


class _ArenaPlay:
    """``_play`` one training step at a time. The resident figure so far only grows as steps
    are added (the pages the arena touched never shrink), so after any step it is a bound the
    final figure is never under: a question about a limit is often answered before the last step."""

    @_without_cyclic_gc
    def __init__(self, program: _Program, sizes: _Sizes) -> None:
        self.program = program
        size = np.array(sizes.of_buffers(program))
        count = len(size)
        from_torch = program.torch_buffers
        # The outputs the loop holds that are the arena's (an ATen or PythonOp output is PyTorch's).
        held = np.array([buffer for buffer in program.held_by_loop if not from_torch[buffer]], dtype=np.int64)
        self._held = held
        self._count = count
        self.live_peak, self._peak_index, self._outside_bytes = _live_pass(program, size, _transients(program, sizes))
        self._most_outside = float(self._outside_bytes.max(initial=0.0))
        # A step's part in the arena as one list of operations (``BFCArena.play``): per event,
        # its allocations, at the YieldOp the frees of the outputs the loop held from the step
        # before (it drops them when forward returns), then its releases. Step r's copy of
        # buffer i is i + (r % 2) * count: a step's buffers are all freed by the end of the
        # next one (the outputs held into it at its YieldOp), so two copies never meet and every
        # step takes one of two lists. The first step's frees of the step before's held outputs
        # find nothing: there was no step before. The pages touched are read where an
        # allocation touched new ones, at the event that allocated it.
        allocated = ~from_torch[program.allocation_buffers]
        released = ~from_torch[program.release_buffers]
        allocations, releases = program.allocation_buffers[allocated], program.release_buffers[released]
        # Without a YieldOp nothing frees the held outputs (a forward-only graph holds none).
        dropped = held if program.yield_index is not None else held[:0]
        held_at = np.full(len(dropped), program.yield_index or 0, dtype=np.int64)
        events = np.concatenate(
            [3 * program.allocation_steps[allocated], 3 * held_at + 1, 3 * program.release_steps[released] + 2]
        )
        order = np.argsort(events, kind="stable")
        self._event_of = events[order] // 3
        kinds = np.concatenate([np.full(len(allocations), ALLOCATE), np.full(len(dropped) + len(releases), FREE)])
        requested = np.concatenate([size[allocations], np.zeros(len(dropped) + len(releases))])
        self._arena = BFCArena()
        self._arena.run([(ALLOCATE, ("constant", name), sizes.known(name)) for name in program.constants])
        self._constant_regions = len(self._arena.growth)
        self._first = self._arena.reserve(2 * count)  # the arena's number of buffer 0
        self._steps = tuple(
            self._arena.numbered(
                kinds[order],
                self._first + np.concatenate([allocations + this, dropped + other, releases + this])[order],
                requested[order],
            )
            for this, other in ((0, count), (count, 0))
        )
        self._seen: set[tuple[object, ...]] = set()  # the arena's state at the end of each step played
        self._repeat = 0
        self.resident = 0.0  # the figure over the steps played so far
        self.early: float | None = None  # the figure after ``_EARLY_STEPS`` steps
        self.done = False

    @_without_cyclic_gc
    def advance(self) -> None:
        """Play the next step; ``done`` once the figure is final."""
        arena, repeat = self._arena, self._repeat
        parity = repeat % 2
        before = arena.touched_bytes
        operations, figures = arena.play(self._steps[parity])
        if len(operations):
            # The pages touched at each event: the figure before the step until an allocation
            # touched more, from that allocation's event on.
            touched = np.full(len(self._outside_bytes), float(before))
            np.maximum.at(touched, self._event_of[operations], figures.astype(np.float64))
            self.resident = max(self.resident, float((np.maximum.accumulate(touched) + self._outside_bytes).max()))
        elif len(self._outside_bytes):
            self.resident = max(self.resident, before + self._most_outside)
        self._repeat += 1
        if self._repeat == _EARLY_STEPS:
            self.early = self.resident
        self.done = self._repeat == _ARENA_STEPS
        # Placed as at the end of an earlier step (the placement often alternates between two):
        # the steps from here repeat the ones after that at the same addresses, so they touch
        # nothing new and only their bytes outside the arena count.
        state = (arena.layout(), arena.addresses(self._first + parity * self._count + self._held))
        if state in self._seen:
            if not self.done and len(self._outside_bytes):
                self.resident = max(self.resident, arena.touched_bytes + self._most_outside)
            self.done = True
        self._seen.add(state)

    def finish(self) -> Timeline:
        """The steps left played, and the play's timeline."""
        while not self.done:
            self.advance()
        return self.timeline()

    def timeline(self) -> Timeline:
        """The play's timeline, once ``done``."""
        if not self.done:
            raise ValueError("the play has steps left: finish() it")
        timeline = _timeline(self.program, self.live_peak, self._peak_index, self.resident)
        growth = self._arena.growth
        constants = self._constant_regions
        return replace(
            timeline,
            early_resident_bytes=self.resident if self.early is None else self.early,
            arena_growth=(*(replace(grown, at_build=True) for grown in growth[:constants]), *growth[constants:]),
        )


@_without_cyclic_gc
def _live_peak(program: _Program, sizes: _Sizes) -> float:
    """The live peak of one step: what a play's resident figure can never be under (every live
    buffer lies in pages the allocator handed out), without playing the allocator."""
    return _live_pass(program, np.array(sizes.of_buffers(program)), _transients(program, sizes))[0]


def _loss_bytes(program: _Program, sizes: _Sizes) -> float:
    yield_index = program.yield_index
    return sizes.torch_loss(program.steps[yield_index]) if yield_index is not None else 0.0


def _transients(program: _Program, sizes: _Sizes) -> dict[int, float]:
    """Per step, the bytes held outside the arena while it runs only: PyTorch's loss at the
    YieldOp, a kernel's scratch on the heap."""
    transients = {index: sum(map(sizes.known, names)) for index, names in enumerate(program.heap) if names}
    if program.yield_index is not None:
        transients[program.yield_index] = transients.get(program.yield_index, 0.0) + _loss_bytes(program, sizes)
    return transients


def _live_pass(program: _Program, size: np.ndarray, transients: Mapping[int, float]) -> tuple[float, int, np.ndarray]:
    """One pass over a step's events without the allocator, at the buffers' sizes ``size``: the
    live peak, the event it comes at, and per event what is held outside ORT's arena
    (PyTorch's gradients, and per step its ``transients``), the same in every step."""
    events = len(program.steps)
    transient = np.zeros(events)
    for index, value in transients.items():
        transient[index] = value

    def held(mask: np.ndarray) -> np.ndarray:
        """Per event, the bytes of ``mask``'s buffers live while it runs: summed in the order
        of the events, one at a time, so the figures are those of a loop over them."""
        buffers = program.event_buffers
        changes = np.where(mask[buffers], program.event_signs * size[buffers], 0.0)
        return np.concatenate([[0.0], np.cumsum(changes)])[program.allocations_end]

    live = held(np.ones(len(size), dtype=bool)) + transient
    outside = held(program.torch_buffers) + transient
    peak_index = int(np.argmax(live)) if events else -1
    if peak_index < 0 or live[peak_index] <= 0.0:
        return 0.0, -1, outside
    return float(live[peak_index]), peak_index, outside


# A CUDA trial's peaks start after its warm-up step; the caching allocator never gives a
# segment back, so the steps after the second reuse what it holds.
_CUDA_STEPS = 3


def _play_cuda(program: _Program, sizes: _Sizes, cuda: CudaSetup) -> Timeline:
    """Run the program for a warm-up step and measured steps through PyTorch's caching
    allocator, which holds ORT's buffers, PyTorch's gradients and its loss's two copies alike:
    the live peak of one step, where it is, and the allocator's peaks after the warm-up.

    With a pool read from a trial after its warm-up step, the steps start from it: the weights
    and the optimizer's state are among its residents, the last step's outputs are the loop's
    blocks (freed at the first step's yield), and every step played is a measured one."""
    yield_index = program.yield_index
    size = sizes.of_buffers(program)
    held, count = program.held_by_loop, len(size)
    loss_bytes = _loss_bytes(program, sizes)
    allocator = cuda.allocator()
    warmed_up = cuda.pool is not None
    loop_blocks = cuda.pool.held_count(BlockUse.LOOP) if cuda.pool is not None else 0
    for name in () if warmed_up else program.constants:
        allocator.allocate(("constant", name), sizes.known(name))
    live, peak, peak_index = 0.0, 0.0, -1
    for repeat in range(_CUDA_STEPS):
        if repeat == 1 and not warmed_up:
            allocator.reset_peaks()
        base, last = repeat * count, (repeat - 1) * count
        for index, (allocated, freed) in enumerate(zip(program.numbers_allocated, program.numbers_released)):
            for buffer in allocated:
                allocator.allocate(base + buffer, size[buffer])
                live += size[buffer] if repeat == 0 else 0.0
            if index == yield_index:
                # The loop drops the last step's outputs: the pool's before the first step.
                dropped: list[object] = (
                    [last + buffer for buffer in held] if repeat else [("loop", i) for i in range(loop_blocks)]
                )
                for gone in dropped:
                    allocator.free(gone)
                for copy in (0, 1):
                    allocator.allocate((repeat, "loss", copy), loss_bytes / 2)
                for copy in (0, 1):
                    allocator.free((repeat, "loss", copy))
            transient = loss_bytes if index == yield_index else 0.0
            if repeat == 0 and live + transient > peak:
                peak, peak_index = live + transient, index
            for buffer in freed:
                allocator.free(base + buffer)
                live -= size[buffer] if repeat == 0 else 0.0
    return _timeline(
        program, peak, peak_index, float(allocator.peak_allocated_bytes), float(allocator.peak_reserved_bytes), "cuda"
    )


def _timeline(
    program: _Program, peak: float, peak_index: int, resident: float, reserved: float = 0.0, device: str = "cpu"
) -> Timeline:
    """The timeline of a play whose live peak ``peak`` came at step ``peak_index``."""
    steps, yield_index = program.steps, program.yield_index
    if peak_index < 0:
        return Timeline(0.0, "", "", "forward", None, False, len(steps), device=device)
    at = steps[peak_index]
    phase = (
        "forward"
        if yield_index is None or peak_index < yield_index
        else "loss"
        if peak_index == yield_index
        else "backward"
    )
    return Timeline(
        peak,
        at.node.name,
        at.node.op_type,
        phase,
        module_path(at.node.name),
        at.recomputed,
        len(steps),
        resident,
        reserved,
        device=device,
    )


class _ScheduleBase:
    """What every config's schedule of ``graph`` in ``order`` shares, worked out once: the
    nodes as steps with nothing recomputed, the graph as numbers for the programs, and for the
    memory-efficient sort (worked out when a config first needs it) the forward nodes in its
    order and each node's producers."""

    def __init__(self, graph: TrainingGraph, order: AnalysisOrder) -> None:
        self.graph, self.order = graph, order
        nodes = graph.nodes
        self.yield_order = next((n.order for n in nodes if n.op_type == "YieldOp"), None)
        self.by_name = {node.name: node for node in nodes}
        self.originals = [_Step(node, node.inputs, node.outputs, False) for node in nodes]
        self.memory_efficient = order in _MEMORY_EFFICIENT

    @functools.cached_property
    def arrays(self) -> _GraphArrays:
        return _GraphArrays(self.graph)

    @functools.cached_property
    def forward(self) -> list[int]:
        return _forward_nodes(self.graph, self.order)

    @functools.cached_property
    def made_by(self) -> dict[str, int]:
        return {name: position for position, node in enumerate(self.graph.nodes) for name in node.outputs if name}

    @functools.cached_property
    def forward_flags(self) -> np.ndarray:
        flags = np.zeros(len(self.graph.nodes), bool)
        flags[self.forward] = True
        return flags

    @functools.cached_property
    def producers(self) -> Runs:
        made_by = self.made_by
        return Runs.of([[made_by[name] for name in node.inputs if name in made_by] for node in self.graph.nodes])


def _schedule(
    graph: TrainingGraph, recompute: Sequence[Recompute], order: AnalysisOrder, base: _ScheduleBase | None = None
) -> tuple[list[_Step], int | None]:
    """The steps in the order ORT runs them with ``recompute`` applied, and the YieldOp's position.

    No config runs in the file's order. A config runs in ``order``, the one the release's
    memory optimizer analyses in: under the memory-efficient sort (1.18, 1.19) a recomputed
    subgraph runs just before the backward node that first reads it; in the other orders it
    is placed before the stashed tensor's first backward consumer in the file. ``base``:
    ``_ScheduleBase(graph, order)`` where the caller keeps it (it is the same for every config)."""
    if base is None:
        base = _ScheduleBase(graph, order)
    by_name, yield_order = base.by_name, base.yield_order
    # A node shared by several recomputed subgraphs is cloned once, before the earliest consumer.
    insert_at: dict[str, int] = {}
    rewired: dict[int, dict[str, str]] = {}
    for plan in recompute:
        members = [by_name[name] for name in plan.nodes if name in by_name]
        entry = by_name.get(plan.entry)
        if entry is None or not members or yield_order is None:
            continue
        stashed = [out for out in entry.outputs if out and any(c > yield_order for c in graph.consumers.get(out, []))]
        first = min((c for out in stashed for c in graph.consumers.get(out, []) if c > yield_order), default=None)
        if first is None:
            continue
        for node in members:
            insert_at[node.name] = min(insert_at.get(node.name, first), first)
        for out in stashed:
            for consumer in graph.consumers.get(out, []):
                if consumer > yield_order:
                    rewired.setdefault(consumer, {})[out] = _clone_name(out)
    cloned = {out for name in insert_at for out in by_name[name].outputs if out}
    clones = [
        _Step(
            by_name[name],
            tuple(_clone_name(i) if i in cloned else i for i in by_name[name].inputs),
            tuple(_clone_name(o) if o else "" for o in by_name[name].outputs),
            True,
        )
        for name in sorted(insert_at, key=lambda n: by_name[n].order)
    ]
    originals = list(base.originals)
    for position, names in rewired.items():
        node = originals[position].node
        originals[position] = _Step(node, tuple(names.get(name, name) for name in node.inputs), node.outputs, False)
    if clones and yield_order is not None and base.memory_efficient:
        steps = _memory_efficient(base, originals, clones, rewired, yield_order)
        return steps, next(i for i, step in enumerate(steps) if step.node.order == yield_order and not step.recomputed)
    inserted: dict[int, list[_Step]] = {}
    for clone in clones:
        inserted.setdefault(insert_at[clone.node.name], []).append(clone)
    steps = []
    yield_index = None
    for step in originals:
        steps.extend(inserted.get(step.node.order, ()))
        if step.node.order == yield_order:
            yield_index = len(steps)
        steps.append(step)
    return steps, yield_index


def _forward_nodes(graph: TrainingGraph, order: AnalysisOrder) -> list[int]:
    """The forward nodes (before the YieldOp) in the memory-efficient ``order``."""
    sequence = memory_efficient_order(graph, deepest_first=order is AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST)
    yield_order = next((n.order for n in graph.nodes if n.op_type == "YieldOp"), None)
    return sequence[: sequence.index(yield_order)] if yield_order is not None else sequence


def _memory_efficient(
    base: _ScheduleBase, originals: list[_Step], clones: list[_Step], rewired: Collection[int], yield_order: int
) -> list[_Step]:
    """``originals`` (those in ``rewired`` reading clones) and ``clones`` in ORT's
    memory-efficient order (``memopt.backends.ort.graph.topology``), the forward nodes as ``base`` lists them."""
    steps = [*originals, *clones]
    made_by = base.made_by
    cloned = [name for clone in clones for name in clone.outputs if name]
    clone_made = {name: len(originals) + i for i, clone in enumerate(clones) for name in clone.outputs if name}

    def reads(step: _Step) -> list[int]:
        return [
            clone_made.get(name, made_by.get(name, -1)) for name in step.inputs if name in clone_made or name in made_by
        ]

    if len(clone_made) == len(cloned) and not any(name in made_by for name in cloned):
        # The steps that read no clone read what they read unchanged.
        producers = base.producers.with_rows(
            {position: reads(steps[position]) for position in rewired}, list(map(reads, clones))
        )
    else:  # a clone's output has a name the graph already uses: what reads it has changed
        producers = Runs.of([reads(step) for step in steps])
    forward = np.concatenate([base.forward_flags, np.zeros(len(clones), bool)])
    # ORT adds the recomputed nodes after every node of the graph, so their indices come last.
    graph_index = base.arrays.session_index
    last = int(graph_index.max(initial=-1))
    node_index = np.concatenate([graph_index, np.arange(last + 1, last + 1 + len(clones))])
    backward = memory_efficient_backward(yield_order, forward, producers, node_index)
    return [steps[position] for position in (*base.forward, *backward)]


def _clone_name(name: str) -> str:
    return f"{name}{RECOMPUTED_SUFFIX}"


@dataclass
class _SizesAt:
    """What every play at some dims shares: the bytes of the tensors looked up there, by name
    (None where a dim is unknown), and of all the graph's tensors by number once asked for."""

    by_name: dict[str, float | None] = field(default_factory=dict)
    graph_sizes: np.ndarray | None = None


class _Sizes:
    """Bytes of each tensor at the dims; unknown shapes are sized from the node's inputs."""

    def __init__(self, program: _Program, dims: Mapping[str, int], known: _SizesAt) -> None:
        self._graph = program.graph
        self._scratch = program.scratch
        self._dims = dims
        self._aliases = program.aliases
        self._known: dict[str, float] = {}  # sizes inferred for tensors of unknown shape
        self._at = known  # shared by every play at these dims: a tensor's size is one
        self._exact_sizes = known.by_name
        self._expressions: dict[str, float] = {}  # a dim named by an expression: its value here

    def of(self, name: str, step: _Step) -> float:
        name = self._aliases.get(name, name)
        exact = self._exact(name)
        if exact is not None:
            return exact
        if name not in self._known:
            inputs = [self._exact(self._aliases.get(i, i)) or self._known.get(i, 0.0) for i in step.inputs if i]
            self._known[name] = sum(inputs) if step.node.op_type in _CONCATS else max(inputs, default=0.0)
        return self._known[name]

    def of_buffers(self, program: _Program) -> list[float]:
        """``of`` for each of ``program``'s buffers, in their order (the allocation order an
        unknown shape is inferred in), the graph's tensors of known shape sized at once."""
        graph_sizes = self._graph_sizes(program.arrays)
        sources = program.buffer_sources
        sizes = np.where(sources >= 0, graph_sizes[sources], np.nan)
        steps, buffers, buffer_steps = program.steps, program.buffers, program.buffer_steps
        for position in np.flatnonzero(np.isnan(sizes)).tolist():
            sizes[position] = self.of(buffers[position], steps[buffer_steps[position]])
        return list(sizes.tolist())

    def _graph_sizes(self, arrays: _GraphArrays) -> np.ndarray:
        """The bytes of each of the graph's tensors (by number), NaN where a dim is unknown:
        each of its shapes sized once."""
        if self._at.graph_sizes is None:
            shapes = [self._bytes(elem_type, dims) for elem_type, dims in arrays.sized]
            self._at.graph_sizes = np.array([*shapes, np.nan])[arrays.sized_shape]
        return self._at.graph_sizes

    def known(self, name: str) -> float:
        """The bytes of a tensor that no node's inputs size (a constant, a kernel's scratch
        buffer): none where its shape is not known."""
        return self._exact(name) or 0.0

    def torch_loss(self, step: _Step) -> float:
        """What PyTorch's loss holds besides the tensors it is handed, at the YieldOp: nothing
        when the model computed its own loss (a scalar among the outputs), else two copies of
        the largest output (a cross-entropy's log-softmax and its gradient)."""
        outputs = [self._exact(name) for name in step.inputs if name]
        known = [size for size in outputs if size is not None]
        if any(size <= _SCALAR_BYTES for size in known):
            return 0.0
        return 2 * max(known, default=0.0)

    def _exact(self, name: str) -> float | None:
        size = self._exact_sizes.get(name, _UNKNOWN)
        if size is not _UNKNOWN:
            return size
        info = self._scratch.get(name) or self._graph.tensor(name)
        dims = _sizable_dims(info)
        size = None if dims is None else self._bytes(info.elem_type, dims)
        self._exact_sizes[name] = size
        return size

    def _bytes(self, elem_type: int | None, dims: tuple[Dim, ...]) -> float:
        return float(element_size(elem_type) or 4) * math.prod(map(self._dim, dims))

    def _dim(self, dim: Dim) -> float:
        """A dim's value at these dims. ORT's shape inference names merged dims by expressions
        (``input_ids_dim0*(input_ids_dim1 - 1)``: a language model's shifted logits, flattened);
        a name, or an expression of names, with no value counts 1, and none counts below 0."""
        if isinstance(dim, int):
            return float(dim)
        if dim is None:
            return 1.0
        value = self._dims.get(dim)
        if value is not None:
            return float(value)
        if dim not in self._expressions:
            try:
                expression = parse_expression(dim)
                known = expression.symbols <= self._dims.keys()
                self._expressions[dim] = max(0.0, expression.evaluate(self._dims)) if known else 1.0
            except ExpressionError:  # not an expression this parser reads: an odd name
                self._expressions[dim] = 1.0
        return self._expressions[dim]


_UNKNOWN = -1.0  # not a size: _Sizes has not looked this tensor up yet


def _sizable_dims(info: TensorInfo) -> tuple[Dim, ...] | None:
    """The tensor's dims where a size can be worked out from them (every dim known, as a
    number or a name), else None."""
    dims = info.dims
    return None if dims is None or any(dim is None for dim in dims) else dims


class _Config(NamedTuple):
    """A config as a simulator remembers it: its plans, sorted, and the partial counts."""

    plans: tuple[PlanKey, ...]
    partial: tuple[tuple[PlanKey, int], ...]


_Memo = tuple[tuple[tuple[str, int], ...], _Config]  # dims, config


class ActivationSimulator:
    """``simulate`` for one graph and its plans, memoised: the planner, ``tune`` and the tune
    screen ask for many configs at one batch and for one config at many batches. Each
    (dims, config) is simulated once; a config's program serves every dims, and the tensors'
    sizes at some dims every config."""

    def __init__(
        self,
        graph: TrainingGraph,
        plans: Mapping[str, Sequence[Recompute]],
        source: str | None = None,
        order: AnalysisOrder = AnalysisOrder.MEMORY_EFFICIENT_DEEPEST_FIRST,
        device: str = "cpu",
        cuda: CudaSetup = CudaSetup(),
    ):
        self.graph = graph
        self.plans = {key: tuple(recomputes) for key, recomputes in plans.items()}
        self.source = source  # the ONNX file the graph was loaded from, when known
        self.order = order  # the order a config runs in: the release's analysis order
        self.device = device  # whose allocator a step is played through: "cuda", else ORT's CPU arena
        self.cuda = cuda  # on CUDA: the allocator's settings and what lives in its pool
        self._cache: dict[_Memo, Timeline] = {}
        # Plays stopped before their last step, once the question asked of them was answered.
        self._plays: dict[_Memo, _ArenaPlay] = {}
        # One question at a time: the tune screen asks from its thread while the tuner's worker
        # plans from another, and a stopped play is shared between them.
        self._lock = threading.RLock()
        # Neither depends on the other: a config's program serves every dims, and the tensors'
        # sizes at some dims every config.
        self._programs: dict[_Config, _Program] = {}
        self._sizes: dict[tuple[tuple[str, int], ...], _SizesAt] = {}
        self._base: _ScheduleBase | None = None  # what every config's schedule shares

    def timeline(
        self, dims: Mapping[str, int], plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> Timeline:
        """The step at ``dims`` with ``plans`` on (the first ``counts[key]`` occurrences where given)."""
        return self._timeline(dims, self._memo(dims, plans, counts))

    def live_bytes(self, dims: Mapping[str, int], plans: Iterable[PlanKey] = ()) -> float:
        """The step's live peak at ``dims``, without starting a play: never over the first of
        ``resident_bounds``. It grows with the dims (every tensor's bytes do), so a search over
        the batch on it alone can rule out every batch past the largest whose live peak fits."""
        memo = self._memo(dims, plans, None)
        with self._lock:
            known, play = self._cache.get(memo), self._plays.get(memo)
            if known is not None:
                return known.peak_bytes
            if play is not None:
                return play.live_peak
            program, sizes = self._prepare(*memo)
            return _live_peak(program, _Sizes(program, dims, sizes))

    def largest_buffer(self, dims: Mapping[str, int]) -> float:
        """The bytes of the largest buffer a step without recompute places in the device's
        allocator at ``dims`` (PyTorch's own left out): where the allocator puts it, in a hole
        left by freed buffers or on pages not touched before, turns on the order of allocations
        the simulation cannot be sure of, so a prediction can be off by that much either way."""
        memo = self._memo(dims, (), None)
        with self._lock:
            program, sizes = self._prepare(*memo)
            size = np.array(_Sizes(program, dims, sizes).of_buffers(program), dtype=float)
        return float(size[~program.torch_buffers].max(initial=0.0))

    def resident_bounds(
        self, dims: Mapping[str, int], plans: Iterable[PlanKey] = (), counts: Mapping[PlanKey, int] | None = None
    ) -> Iterator[float]:
        """Figures ``timeline(…).held_bytes`` is never under, each for more work and none
        looser than the one before, the last the figure itself: the step's live peak (every
        live buffer lies in pages the allocator handed out, and its bytes are whole), then on
        CPU the arena's figure after each step played. A question about a limit stops reading
        once it is answered, and the play waits here for a later one."""
        memo = self._memo(dims, plans, counts)
        with self._lock:
            known = self._cache.get(memo)
            play = None if known is not None or self.device == "cuda" else self._kept_play(dims, memo)
            if known is not None:
                first = known.held_bytes
            elif play is not None:
                first = max(play.live_peak, play.resident)  # a resumed play has played steps already
            else:
                program, sizes = self._prepare(*memo)
                first = _live_peak(program, _Sizes(program, dims, sizes))
        yield first
        if known is not None:
            return
        if play is None:  # CUDA: the caching allocator is played whole
            yield self._timeline(dims, memo).held_bytes
            return
        while True:
            with self._lock:  # the tune screen asks while the tuner's worker plans
                if not play.done:
                    play.advance()
                # Read under the lock: another thread may finish the play while this one waits
                # at the yield, and a bound read before that must not be taken for the last.
                finished = play.done
                if not finished:
                    bound = play.resident
                else:
                    if self._plays.get(memo) is play:
                        del self._plays[memo]
                    bound = self._cache.setdefault(memo, play.timeline()).resident_bytes
            yield bound
            if finished:
                return

    def _timeline(self, dims: Mapping[str, int], memo: _Memo) -> Timeline:
        with self._lock:
            if memo not in self._cache:
                play = self._plays.pop(memo, None)
                if play is None:
                    program, sizes = self._prepare(*memo)
                    self._cache[memo] = _simulate(program, dims, sizes, self.device, self.cuda)
                else:
                    self._cache[memo] = play.finish()
            return self._cache[memo]

    def _kept_play(self, dims: Mapping[str, int], memo: _Memo) -> _ArenaPlay:
        """The config's play where one was stopped, else a new one; kept (most recent last)."""
        play = self._plays.pop(memo, None)
        if play is None:
            program, sizes = self._prepare(*memo)
            play = _ArenaPlay(program, _Sizes(program, dims, sizes))
        if len(self._plays) >= _PLAYS_KEPT:
            del self._plays[next(iter(self._plays))]
        self._plays[memo] = play
        return play

    def _memo(self, dims: Mapping[str, int], plans: Iterable[PlanKey], counts: Mapping[PlanKey, int] | None) -> _Memo:
        """The key a question is remembered by: the dims, and the config."""
        counts = counts or {}
        chosen = tuple(sorted(set(plans)))
        partial = tuple(sorted((key, count) for key, count in counts.items() if key in chosen and count >= 0))
        return tuple(sorted(dims.items())), _Config(chosen, partial)

    @_without_cyclic_gc
    def _prepare(self, at: tuple[tuple[str, int], ...], config: _Config) -> tuple[_Program, _SizesAt]:
        """The config's program and the tensors' sizes known at the dims ``at``, made or kept."""
        program = self._programs.pop(config, None)  # kept most recent last
        if program is None:
            counts = dict(config.partial)
            recompute = [
                r
                for key in config.plans
                for r in self.plans.get(key, ())[: counts[key] if counts.get(key, -1) >= 0 else None]
            ]
            if self._base is None:
                self._base = _ScheduleBase(self.graph, self.order)
            program = _program(self.graph, recompute, self.order, self._base, self.device)
            if len(self._programs) >= _PROGRAMS_KEPT:
                del self._programs[next(iter(self._programs))]
        self._programs[config] = program
        if at not in self._sizes and len(self._sizes) >= _SIZES_KEPT:
            del self._sizes[next(iter(self._sizes))]  # the oldest: searches move on through the batches
        return program, self._sizes.setdefault(at, _SizesAt())
