"""Element-count expressions from the shape strings ORT prints."""

from __future__ import annotations

from memopt.graph.expr import Expression, ExpressionError, parse_expression

__all__ = ["element_count"]


def element_count(dims: list[str]) -> Expression | None:
    """The product of ``dims`` (values or dim_param names); None if one is not a size expression."""
    text = "*".join(f"({dim})" for dim in dims) or "1"
    try:
        return parse_expression(text)
    except ExpressionError:
        return None
