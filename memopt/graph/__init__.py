"""Symbolic sizes: a tensor's size as an expression over dim names, shared by both back ends.

Sizes stay symbolic (``Expression``/``Polynomial`` over the dim names of a graph or a scan)
until a batch and a sequence length give those names values. ORT's training graph, whose
sizes these are, is ``memopt.backends.ort.graph``.
"""

from memopt.graph.expr import Expression, ExpressionError, UnknownSymbolError, parse_expression
from memopt.graph.polynomial import NotPolynomialError, Polynomial

__all__ = [
    "Expression",
    "ExpressionError",
    "NotPolynomialError",
    "Polynomial",
    "UnknownSymbolError",
    "parse_expression",
]
