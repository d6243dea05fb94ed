"""Byte counts as exact polynomials in symbolic dims, e.g. ``16384*ids_dim0*ids_dim1``.

Recompute savings are sums of products of dims and constants, so a polynomial is their
normal form: two savings are equal exactly when their polynomials are, whatever order
or parenthesisation ORT printed them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache

from memopt.graph.expr import (
    BinaryOp,
    Expression,
    ExpressionError,
    Number,
    Symbol,
    Term,
    UnaryMinus,
    UnknownSymbolError,
    fold,
    format_term,
    parse_expression,
)

__all__ = ["Monomial", "Polynomial", "NotPolynomialError"]

# A monomial: sorted (symbol, power) pairs; () is the constant term.
Monomial = tuple[tuple[str, int], ...]


class NotPolynomialError(ValueError):
    """The expression divides by a symbol, raises to a non-integer power, or calls a function."""


@dataclass(frozen=True, eq=False)
class Polynomial:
    terms: Mapping[Monomial, Fraction] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Polynomial) and dict(self.terms) == dict(other.terms)

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    @staticmethod
    def constant(value: Fraction | int | float) -> Polynomial:
        value = Fraction(value)
        return Polynomial({(): value} if value else {})

    @staticmethod
    def symbol(name: str) -> Polynomial:
        return Polynomial({((name, 1),): Fraction(1)})

    @staticmethod
    def product_of(factors: Iterable[int | str]) -> Polynomial:
        """The product of dims given as values or symbolic names.

        A name may itself be an expression (ORT's shape inference writes merged dims as
        ``a*b`` or ``a + 1``); it is read as one, as sympy reads it in ORT.
        """
        result = Polynomial.constant(1)
        for factor in factors:
            result = result * (Polynomial.of_dim(factor) if isinstance(factor, str) else Polynomial.constant(factor))
        return result

    @staticmethod
    @cache
    def of_dim(name: str) -> Polynomial:
        try:
            return _convert(parse_expression(name).root)
        except (ExpressionError, NotPolynomialError):
            return Polynomial.symbol(name)

    @staticmethod
    def from_expression(expression: Expression) -> Polynomial:
        return _convert(expression.root)

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(name for monomial in self.terms for name, _ in monomial)

    def __radd__(self, other: object) -> Polynomial:
        if other == 0:  # sum() starts from 0
            return self
        return NotImplemented

    def __add__(self, other: Polynomial) -> Polynomial:
        terms = dict(self.terms)
        for monomial, coefficient in other.terms.items():
            total = terms.get(monomial, Fraction(0)) + coefficient
            if total:
                terms[monomial] = total
            else:
                terms.pop(monomial, None)
        return Polynomial(terms)

    def __mul__(self, other: Polynomial) -> Polynomial:
        result = Polynomial()
        for left, a in self.terms.items():
            for right, b in other.terms.items():
                result = result + Polynomial({_multiply(left, right): a * b})
        return result

    def scale(self, factor: Fraction | int | float) -> Polynomial:
        return self * Polynomial.constant(factor)

    def evaluate(self, dims: Mapping[str, int | float]) -> float:
        missing = self.symbols - set(dims)
        if missing:
            raise UnknownSymbolError(frozenset(missing), str(self))
        total = Fraction(0)
        for monomial, coefficient in self.terms.items():
            value = coefficient
            for name, power in monomial:
                value *= Fraction(dims[name]) ** power
            total += value
        return float(total)

    def __str__(self) -> str:
        """sympy's style for ORT's savings: ``16384.0*ids_dim0*ids_dim1``, ``64.0*a*b**2``."""
        if not self.terms:
            return "0"
        ordered = sorted(self.terms.items(), key=lambda item: (-sum(p for _, p in item[0]), item[0]))
        text = " + ".join(_term(monomial, coefficient) for monomial, coefficient in ordered)
        return text.replace("+ -", "- ")


def _multiply(left: Monomial, right: Monomial) -> Monomial:
    powers: dict[str, int] = dict(left)
    for name, power in right:
        powers[name] = powers.get(name, 0) + power
    return tuple(sorted(powers.items()))


def _term(monomial: Monomial, coefficient: Fraction) -> str:
    factors = [f"{name}**{power}" if power > 1 else name for name, power in monomial]
    number = float(coefficient)
    return "*".join([f"{number:.1f}" if number == int(number) else repr(number), *factors])


def _convert(root: Term) -> Polynomial:
    return fold(root, _convert_leaf, _combine)


def _convert_leaf(node: Term) -> Polynomial:
    if isinstance(node, Number):
        return Polynomial.constant(node.value)
    assert isinstance(node, Symbol)
    return Polynomial.symbol(node.name)


def _combine(node: Term, operands: list[Polynomial]) -> Polynomial:
    if isinstance(node, UnaryMinus):
        return operands[0].scale(-1)
    if isinstance(node, BinaryOp):
        left, right = operands
        if node.operator == "+":
            return left + right
        if node.operator == "-":
            return left + right.scale(-1)
        if node.operator == "*":
            return left * right
        if node.operator == "/" and not right.symbols and right.terms:
            return left.scale(1 / right.terms[()])
        if node.operator == "**" and not right.symbols:
            exponent = right.terms.get((), Fraction(0))
            if exponent.denominator == 1 and exponent >= 0:
                result = Polynomial.constant(1)
                for _ in range(int(exponent)):
                    result = result * left
                return result
    raise NotPolynomialError(f"not a polynomial: {format_term(node)}")
