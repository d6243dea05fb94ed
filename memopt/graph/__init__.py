"""The training graph: ORT's execution graph loaded from ONNX, and the sizes in it.

A graph comes from the ONNX file ORTModule saves (``load_graph``) or is built from a
forward-only model through ORT's own gradient pipeline (``build_training_graph``).
Tensor sizes stay symbolic (``Expression``/``Polynomial`` over the graph's dim names)
until ``resolve_dims`` gives those names values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.graph.expr import Expression, ExpressionError, UnknownSymbolError, parse_expression
from memopt.graph.polynomial import NotPolynomialError, Polynomial
from memopt.lazy import lazy_exports

if TYPE_CHECKING:
    from memopt.graph.gradient import LOSSES, GradientError, build_training_graph
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
        session_input_beside,
    )

# The graph itself needs onnx (a third of a second to import); reading a log needs only the
# expressions, so the rest is imported on first use.
_LAZY = {
    "memopt.graph.gradient": ("LOSSES", "GradientError", "build_training_graph"),
    "memopt.graph.sizes": ("DimsError", "batch_symbols", "resolve_dims", "sequence_symbols"),
    "memopt.graph.training_graph": (
        "Dim",
        "GraphError",
        "Node",
        "TensorInfo",
        "TrainingGraph",
        "element_count_dims",
        "graph_from_model",
        "load_graph",
        "session_input_beside",
    ),
}
__getattr__ = lazy_exports(__name__, _LAZY)


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
    "session_input_beside",
]
