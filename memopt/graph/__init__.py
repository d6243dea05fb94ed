"""The training graph: ORT's execution graph loaded from ONNX, and the sizes in it.

A graph comes from the ONNX file ORTModule saves (``load_graph``) or is built from a
forward-only model through ORT's own gradient pipeline (``build_training_graph``).
Tensor sizes stay symbolic (``Expression``/``Polynomial`` over the graph's dim names)
until ``resolve_dims`` gives those names values.
"""

from memopt.graph.expr import Expression, ExpressionError, UnknownSymbolError, parse_expression
from memopt.graph.gradient import LOSSES, GradientError, build_training_graph
from memopt.graph.polynomial import NotPolynomialError, Polynomial
from memopt.graph.sizes import DimsError, batch_symbols, resolve_dims, sequence_symbols
from memopt.graph.training_graph import (
    Dim,
    GraphError,
    Node,
    TensorInfo,
    TrainingGraph,
    element_count_dims,
    graph_from_model,
    load_graph,
)

__all__ = [
    "LOSSES",
    "Dim",
    "DimsError",
    "Expression",
    "ExpressionError",
    "GradientError",
    "GraphError",
    "Node",
    "NotPolynomialError",
    "Polynomial",
    "TensorInfo",
    "TrainingGraph",
    "UnknownSymbolError",
    "batch_symbols",
    "build_training_graph",
    "element_count_dims",
    "graph_from_model",
    "load_graph",
    "parse_expression",
    "resolve_dims",
    "sequence_symbols",
]
