"""The training graph: ORT's execution graph loaded from ONNX, and the sizes in it.

A graph comes from the ONNX file ORTModule saves (``load_graph``) or is built from a
forward-only model through ORT's own gradient pipeline (``build_training_graph``).
Tensor sizes stay symbolic (``memopt.graph``'s ``Expression``/``Polynomial`` over the
graph's dim names) until ``resolve_dims`` gives those names values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memopt.lazy import lazy_exports

if TYPE_CHECKING:
    from memopt.backends.ort.graph.gradient import LOSSES, GradientError, build_training_graph
    from memopt.backends.ort.graph.sizes import DimsError, batch_symbols, resolve_dims, sequence_symbols
    from memopt.backends.ort.graph.training_graph import (
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
    "memopt.backends.ort.graph.gradient": ("LOSSES", "GradientError", "build_training_graph"),
    "memopt.backends.ort.graph.sizes": ("DimsError", "batch_symbols", "resolve_dims", "sequence_symbols"),
    "memopt.backends.ort.graph.training_graph": (
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
    "GradientError",
    "GraphError",
    "Node",
    "TensorInfo",
    "TrainingGraph",
    "batch_symbols",
    "build_training_graph",
    "element_count_dims",
    "graph_from_model",
    "load_graph",
    "resolve_dims",
    "sequence_symbols",
    "session_input_beside",
]
