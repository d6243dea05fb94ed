"""A training graph as ORT sees it: nodes in a topological order, tensors with shapes.

Loaded from the ONNX file ORTModule saves (``memopt_execution_model_training.onnx``), nodes
in file order: ORT's default topological order, the one releases up to 1.18 analyse (1.19
walks another, rebuilt by ``memopt.backends.ort.graph.topology``; ``renumbered`` puts a graph in it).
Weights are dropped after loading; only names, types and shapes stay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx
from onnx.defs import SchemaError, get_schema

from memopt.errors import MemoptError

__all__ = [
    "Dim",
    "GraphError",
    "Node",
    "TensorInfo",
    "TrainingGraph",
    "element_count_dims",
    "graph_from_model",
    "load_graph",
    "session_input_beside",
]

# A dimension: its value, its symbolic name, or None when ORT knows neither.
Dim = int | str | None

_ONNX_DOMAINS = ("", "ai.onnx")
# ORT's own contrib ops are registered at opset 1 in their domains; ORT also registers
# LayerNormalization/SimplifiedLayerNormalization at opset 1 in the ONNX domain.
_ORT_CONTRIB_SINCE_VERSION = 1


# ORTModule's file names: the graph its session runs, and the graph it handed that session.
_EXECUTION_SUFFIX = "_execution_model_training.onnx"
_SESSION_INPUT_SUFFIX = "_optimized_training.onnx"
_BACKWARD_PASS = "__backwardpass"

# Normalizations whose outputs after the first are per-row statistics (mean, 1/std).
_NORMS_WITH_STATISTICS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})
# Integer initializers up to this size are kept for ONNX's shape inference (shape constants).
_SHAPE_CONSTANT_LIMIT = 64


class GraphError(MemoptError):
    """The ONNX file cannot be read as a graph."""


@dataclass(frozen=True)
class TensorInfo:
    """Element type (ONNX ``TensorProto`` enum) and shape; ``dims`` is None when unknown."""

    elem_type: int | None
    dims: tuple[Dim, ...] | None


@dataclass(frozen=True)
class Node:
    order: int
    name: str
    op_type: str
    domain: str
    since_version: int | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    func_name: str | None = None
    backward_pass: bool = False  # ORT's gradient builder marked it ``__backwardpass``

    @property
    def qualified_op(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"


@dataclass
class TrainingGraph:
    nodes: list[Node]
    tensors: dict[str, TensorInfo]
    producer: dict[str, tuple[int, int]] = field(default_factory=dict)
    consumers: dict[str, list[int]] = field(default_factory=dict)
    graph_inputs: tuple[str, ...] = ()
    graph_outputs: tuple[str, ...] = ()
    # The graph's constants (initializers that are not inputs), in file order: ORT places them
    # in its arena when the session is built, before any step.
    initializers: tuple[str, ...] = ()
    # Each node's index in ORT's training session (its position in the graph the session
    # loaded; nodes the session's own transformers made follow, in file order), when that
    # graph is known: ORT breaks ties between independent nodes by this index.
    session_indices: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for node in self.nodes:
            for index, name in enumerate(node.outputs):
                if name:
                    self.producer[name] = (node.order, index)
            for name in node.inputs:
                if name:
                    consumers = self.consumers.setdefault(name, [])
                    if node.order not in consumers:
                        consumers.append(node.order)

    def renumbered(self, sequence: Sequence[int]) -> TrainingGraph:
        """The same graph with its nodes in ``sequence`` (every node's order once), renumbered."""
        if sorted(sequence) != list(range(len(self.nodes))):
            raise ValueError("a node order must list every node once")
        nodes = [replace(self.nodes[old], order=new) for new, old in enumerate(sequence)]
        indices = None if self.session_indices is None else tuple(self.session_indices[old] for old in sequence)
        return TrainingGraph(
            nodes=nodes,
            tensors=self.tensors,
            graph_inputs=self.graph_inputs,
            graph_outputs=self.graph_outputs,
            initializers=self.initializers,
            session_indices=indices,
        )

    def session_index(self, order: int) -> int:
        """The node's index in ORT's session, or its file position when that is unknown."""
        return order if self.session_indices is None else self.session_indices[order]

    def tensor(self, name: str) -> TensorInfo:
        return self.tensors.get(name, TensorInfo(None, None))

    def input_edges(self, node: Node) -> list[tuple[int, int, int]]:
        """``(producer order, producer output index, input index)`` for inputs made by nodes."""
        edges = []
        for input_index, name in enumerate(node.inputs):
            if name in self.producer:
                producer_order, output_index = self.producer[name]
                edges.append((producer_order, output_index, input_index))
        return sorted(edges)


def load_graph(path: Path | str, *, session_input: Path | str | None = None) -> TrainingGraph:
    """The training graph saved at ``path``; ``session_input``: the graph ORTModule handed
    its session (``*_optimized_training.onnx``, saved beside it), for ORT's node indices."""
    graph = graph_from_model(_load_model(path))
    if session_input is None:
        return graph
    loaded = {node.name: index for index, node in enumerate(_load_model(session_input).graph.node)}
    made_in_session = (node for node in graph.nodes if node.name not in loaded)
    indices = {**loaded, **{node.name: len(loaded) + rank for rank, node in enumerate(made_in_session)}}
    return replace(graph, session_indices=tuple(indices[node.name] for node in graph.nodes))


def session_input_beside(execution_graph: Path) -> Path | None:
    """The graph ORTModule handed its session, saved beside its execution graph, if there."""
    name = execution_graph.name
    if not name.endswith(_EXECUTION_SUFFIX):
        return None
    beside = execution_graph.with_name(name[: -len(_EXECUTION_SUFFIX)] + _SESSION_INPUT_SUFFIX)
    return beside if beside.is_file() else None


def _load_model(path: Path | str) -> onnx.ModelProto:
    try:
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError as err:
        raise GraphError(f"{path}: no such file") from err
    except Exception as err:  # protobuf raises DecodeError and others for corrupt files
        raise GraphError(f"{path} is not a readable ONNX model ({type(err).__name__})") from err
    if not model.graph.node:
        raise GraphError(f"{path} holds no graph nodes")
    return model


def graph_from_model(model: onnx.ModelProto) -> TrainingGraph:
    opsets = {entry.domain: entry.version for entry in model.opset_import}
    graph = model.graph
    tensors: dict[str, TensorInfo] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensors[value.name] = _tensor_info(value.type)
    for initializer in graph.initializer:
        tensors.setdefault(initializer.name, TensorInfo(initializer.data_type, tuple(initializer.dims)))
    for node in graph.node:
        _infer_untyped_outputs(node, tensors)
    _infer_with_onnx(model, tensors)
    inputs = tuple(value.name for value in graph.input)
    input_names = frozenset(inputs)
    nodes = [
        Node(
            order=order,
            name=node.name,
            op_type=node.op_type,
            domain=node.domain,
            since_version=_since_version(node.op_type, node.domain, opsets),
            inputs=tuple(node.input),
            outputs=tuple(node.output),
            func_name=next((a.s.decode() for a in node.attribute if a.name == "func_name"), None),
            backward_pass=any(a.name == _BACKWARD_PASS and a.i % 2 == 1 for a in node.attribute),
        )
        for order, node in enumerate(graph.node)
    ]
    return TrainingGraph(
        nodes=nodes,
        tensors=tensors,
        graph_inputs=inputs,
        graph_outputs=tuple(value.name for value in graph.output),
        initializers=tuple(i.name for i in graph.initializer if i.name not in input_names),
    )


def _infer_untyped_outputs(node: onnx.NodeProto, tensors: dict[str, TensorInfo]) -> None:
    """Type and shape of contrib-op outputs the saved graph leaves untyped but ORT knows.

    ORT's own shape inference types them in the session (and its memory optimizer lists
    them as stashed activations); the saved execution graph carries no value_info for them.
    """
    missing = [i for i, name in enumerate(node.output) if name and name not in tensors]
    if not missing:
        return
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in _NORMS_WITH_STATISTICS and node.input:
        source = tensors.get(node.input[0], TensorInfo(None, None))
        statistics_type = int(attributes.get("stash_type", onnx.TensorProto.FLOAT))
        dims = None
        if source.dims is not None:
            rank = len(source.dims)
            axis = int(attributes.get("axis", -1))
            axis = axis + rank if axis < 0 else axis
            dims = (*source.dims[:axis], *(1,) * (rank - axis)) if 0 <= axis <= rank else None
        for index in missing:
            if index >= 1:  # mean / inverse standard deviation
                tensors[node.output[index]] = TensorInfo(statistics_type, dims)
    elif node.op_type == "ConcatTraining" and 1 in missing:  # per_input_length
        tensors[node.output[1]] = TensorInfo(onnx.TensorProto.INT64, (sum(1 for name in node.input if name),))


def _infer_with_onnx(model: onnx.ModelProto, tensors: dict[str, TensorInfo]) -> None:
    """Types and shapes of ONNX-op outputs the saved graph leaves untyped, by ONNX's own
    shape inference (the one ORT runs on its session's graph).

    ORT's graph transformers make new tensors (``…_token_<k>``: a Reshape moved before a
    MatMul, a label Slice) that the saved graph carries no value_info for, while ORT's
    memory optimizer types and sizes them. A dim the inference cannot tell stays unknown
    (None) rather than taking the name the inference invents for it.
    """
    graph = model.graph
    if all(name in tensors for node in graph.node for name in node.output if name):
        return
    light = onnx.ModelProto()
    light.CopyFrom(model)
    del light.graph.initializer[:]
    for initializer in graph.initializer:
        if initializer.data_type == onnx.TensorProto.INT64 and math.prod(initializer.dims) <= _SHAPE_CONSTANT_LIMIT:
            light.graph.initializer.append(initializer)  # shape constants: what Reshape's inference reads
        else:
            light.graph.input.append(
                onnx.helper.make_tensor_value_info(initializer.name, initializer.data_type, list(initializer.dims))
            )
    try:
        inferred = onnx.shape_inference.infer_shapes(light).graph.value_info
    except Exception:  # the file's own types stand: the inference is best effort
        return
    named = {d for info in tensors.values() for d in info.dims or () if isinstance(d, str)}
    for value in inferred:
        if value.name in tensors:
            continue
        info = _tensor_info(value.type)
        if info.elem_type:
            dims = (
                None
                if info.dims is None
                else tuple(d if not isinstance(d, str) or d in named else None for d in info.dims)
            )
            tensors[value.name] = TensorInfo(info.elem_type, dims)


def _tensor_info(type_proto: onnx.TypeProto) -> TensorInfo:
    if not type_proto.HasField("tensor_type"):
        return TensorInfo(None, None)
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return TensorInfo(tensor.elem_type, None)
    return TensorInfo(tensor.elem_type, tuple(_dim(d) for d in tensor.shape.dim))


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    if dim.HasField("dim_value"):
        return dim.dim_value
    if dim.HasField("dim_param"):
        return dim.dim_param
    return None


def _since_version(op_type: str, domain: str, opsets: dict[str, int]) -> int | None:
    if domain not in _ONNX_DOMAINS:
        return _ORT_CONTRIB_SINCE_VERSION
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None:
        return None
    try:
        return get_schema(op_type, opset, "").since_version
    except SchemaError:
        return _ORT_CONTRIB_SINCE_VERSION  # an ORT-registered op in the ONNX domain


def element_count_dims(dims: Sequence[Dim] | None) -> int | None:
    """The element count of a fully static shape, else None."""
    if dims is None:
        return None
    static = [d for d in dims if isinstance(d, int)]
    return math.prod(static) if len(static) == len(dims) else None
