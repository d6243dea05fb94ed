"""The whitelist expression parser: ORT's saving/shape texts, errors, and round trips."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memopt.errors import MemoptError
from memopt.graph.expr import ExpressionError, UnknownSymbolError, parse_expression


@pytest.mark.parametrize(
    ("text", "dims", "expected"),
    [
        ("16384.0*ids_dim0*ids_dim1", {"ids_dim0": 16, "ids_dim1": 256}, 67_108_864),
        ("64.0*ids_dim0*ids_dim1**2", {"ids_dim0": 16, "ids_dim1": 256}, 67_108_864),
        ("((input_ids_dim0)*(input_ids_dim1)*(64))", {"input_ids_dim0": 4, "input_ids_dim1": 16}, 4096),
        ("(inputs_input_ids_dim1 - 1)", {"inputs_input_ids_dim1": 17}, 16),
        ("(((1)))", {}, 1),
        ("-a**2", {"a": 3}, -9),
        ("(-a)**2", {"a": 3}, 9),
        ("2**3**2", {}, 512),
        ("a/b*2", {"a": 3, "b": 4}, 1.5),
        ("a - b - c", {"a": 10, "b": 3, "c": 2}, 5),
        ("Max(a, 2*b) + floor(a/4)", {"a": 10, "b": 3}, 12),
        ("1.5e+3*x", {"x": 2}, 3000),
        ("a*-b", {"a": 2, "b": 3}, -6),
    ],
)
def test_evaluates_ort_texts(text: str, dims: dict[str, int], expected: float) -> None:
    assert parse_expression(text).evaluate(dims) == expected


def test_symbols_and_exact_arithmetic() -> None:
    expression = parse_expression("0.1*a + 0.2*a")
    assert expression.symbols == {"a"}
    assert expression.evaluate_exact({"a": 10}) == Fraction(3)


def test_unknown_symbols_are_named() -> None:
    expression = parse_expression("16384.0*ids_dim0*ids_dim1")
    with pytest.raises(UnknownSymbolError) as caught:
        expression.evaluate({"ids_dim0": 2})
    assert caught.value.missing == {"ids_dim1"}
    assert "ids_dim1" in str(caught.value) and isinstance(caught.value, MemoptError)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a +",
        "(a",
        "a)",
        "a b",
        "__import__('os')",
        "a.b",
        "a; b",
        "lambda: 1",
        "f(a)",
        "floor(a, b)",
        "2**100000",
        "9**9**9**9",
        "1e999999",
        "a @ b",
        "'x'",
        "a,b",
    ],
)
def test_rejects_everything_else(text: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        expression = parse_expression(text)
        expression.evaluate({"a": 2, "b": 3})
    assert "\n" not in str(caught.value)


def test_division_by_zero_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError):
        parse_expression("a/(b-b)").evaluate({"a": 1, "b": 2})


@pytest.mark.parametrize(
    "text",
    [
        "16384.0*ids_dim0*ids_dim1",
        "-(a + b)*c",
        "(-a)**2",
        "a**-b",
        "a - (b - c)",
        "a/(b*c)",
        "2**3**2",
        "Max(a, b - 1)",
        "-a*b",
        "a - -b",
    ],
)
def test_formatting_round_trips(text: str) -> None:
    expression = parse_expression(text)
    assert parse_expression(str(expression)).root == expression.root


_SYMBOLS = st.sampled_from(["a", "b", "ids_dim0"])
_ATOMS = st.one_of(_SYMBOLS, st.integers(0, 50).map(str), st.sampled_from(["16384.0", "0.5"]))
_EXPRESSIONS = st.recursive(
    _ATOMS,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(lambda t: f"({t[0]}){t[1]}({t[2]})"),
        st.tuples(inner, st.integers(0, 3)).map(lambda t: f"({t[0]})**{t[1]}"),
        inner.map(lambda e: f"-({e})"),
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(_EXPRESSIONS)
def test_generated_expressions_round_trip_and_match_python(text: str) -> None:
    expression = parse_expression(text)
    dims = {"a": 3, "b": 7, "ids_dim0": 11}
    assert parse_expression(str(expression)).root == expression.root
    try:
        value = expression.evaluate_exact(dims)
    except ExpressionError:
        return  # division by zero
    # Python's own arithmetic on Fractions is the oracle here (test code, trusted text).
    # Every literal becomes a Fraction, so "(1)/(3)" is 1/3 exactly, as memopt computes it.
    exact_text = re.sub(r"(?<![\w.])\d+(?:\.\d+)?", lambda match: f"Fraction('{match.group()}')", text)
    namespace = {"Fraction": Fraction, **{name: Fraction(value) for name, value in dims.items()}}
    oracle = eval(exact_text, {"__builtins__": {}}, namespace)
    assert value == oracle


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_random_text_raises_only_expression_errors(text: str) -> None:
    try:
        parse_expression(text).evaluate({"a": 1})
    except MemoptError:
        pass
