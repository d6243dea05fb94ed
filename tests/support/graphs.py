"""Hand-made training graphs for the unit tests, no ORT.

``training_graph`` builds one with onnx.helper as ORTModule lays it out (forward nodes, a
com.microsoft YieldOp, backward nodes reading stashed forward activations) and loads it with
``graph_from_model``; ``node_graph`` builds one node by node for the liveness simulation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx
from onnx import TensorProto, helper

from memopt.backends.ort.graph.training_graph import Node, TensorInfo, TrainingGraph, graph_from_model
from memopt.backends.ort.scan import ScanReport

__all__ = [
    "FLOAT",
    "MS",
    "STEP",
    "STEP_NODES",
    "keys",
    "node",
    "node_graph",
    "stashed_gelu",
    "training_graph",
    "yield_op",
]

MS = "com.microsoft"
DEFAULT_TENSOR = (TensorProto.FLOAT, ("batch", 16))


def training_graph(
    *nodes: onnx.NodeProto,
    tensors: Mapping[str, tuple[int, Sequence[int | str | None] | None] | None] | None = None,
    inputs: Sequence[str] = ("x",),
    opset: int = 17,
) -> TrainingGraph:
    """A graph of ``nodes`` in topological order (forward, YieldOp, backward).

    Every tensor is float32 ``("batch", 16)`` unless ``tensors`` gives ``(elem_type, dims)``
    (dims None: shape unknown) or None (no type recorded). ``inputs`` are the graph inputs.
    Unnamed nodes are named ``<OpType>_<order>``.
    """
    tensors = tensors or {}
    for order, node in enumerate(nodes):
        node.name = node.name or f"{node.op_type}_{order}"
    names = dict.fromkeys(name for node in nodes for name in (*node.input, *node.output) if name)
    names.update(dict.fromkeys(inputs))

    def info(name: str) -> onnx.ValueInfoProto | None:
        spec = tensors.get(name, DEFAULT_TENSOR)
        return None if spec is None else helper.make_tensor_value_info(name, spec[0], spec[1])

    value_info = [v for name in names if name not in inputs and (v := info(name)) is not None]
    graph = helper.make_graph(list(nodes), "tiny", [info(name) for name in inputs], [], value_info=value_info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    return graph_from_model(model)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], **kwargs: object) -> onnx.NodeProto:
    return helper.make_node(op_type, list(inputs), list(outputs), **kwargs)


def yield_op(*outputs: str) -> onnx.NodeProto:
    return node("YieldOp", outputs, [f"d{o}" for o in outputs], domain=MS)


def keys(report: ScanReport) -> list[str]:
    """The plan keys a scan found, in its order."""
    return [p.key for p in report.patterns]


def stashed_gelu(
    elem_type: int = TensorProto.FLOAT, dims: tuple[int | str | None, ...] | None = ("batch", "seq", 64)
) -> TrainingGraph:
    """g = Gelu(x) of ``elem_type``/``dims``, used in forward and by the backward pass."""
    return training_graph(
        node("Gelu", ["x"], ["g"], domain=MS),
        node("Mul", ["g", "g"], ["y"]),
        yield_op("y"),
        node("Mul", ["dy", "g"], ["dx"]),
        tensors={"x": (elem_type, dims), "g": (elem_type, dims)},
    )


FLOAT = 1  # TensorProto.FLOAT: 4 bytes


def node_graph(
    nodes: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]],
    outputs: tuple[str, ...] = (),
    wide: frozenset[str] = frozenset(),
    scalars: frozenset[str] = frozenset(),
) -> TrainingGraph:
    """Nodes as (name, op, inputs, outputs); every tensor is ``b`` × 256 floats (1 KiB per
    sample), those in ``wide`` four times that, those in ``scalars`` one float."""

    def dims(name: str) -> tuple[str | int, ...]:
        return () if name in scalars else ("b", 1024 if name in wide else 256)

    built = [Node(i, name, op, "", 1, inputs, outs) for i, (name, op, inputs, outs) in enumerate(nodes)]
    tensors = {t: TensorInfo(FLOAT, dims(t)) for n in built for t in (*n.inputs, *n.outputs)}
    return TrainingGraph(built, tensors, graph_inputs=("x",), graph_outputs=outputs)


# forward: x -> a (Gelu) -> c (MatMul) -> yield; backward reads a (stashed) and produces the gradient.
STEP_NODES: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    ("gelu", "Gelu", ("x",), ("a",)),
    ("mm", "MatMul", ("a", "w"), ("c",)),
    ("yield", "YieldOp", ("c",), ("dc",)),
    ("mm_grad", "MatMul", ("dc", "a"), ("dw",)),
]
STEP = node_graph(STEP_NODES, outputs=("dw",))
