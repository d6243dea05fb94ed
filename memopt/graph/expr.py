"""Symbolic size expressions from ORT logs, parsed by a whitelist grammar.

ORT prints memory savings and tensor sizes as sympy-style text
(``16384.0*ids_dim0*ids_dim1``, ``((input_ids_dim0)*(input_ids_dim1)*(64))``,
``64.0*ids_dim0*ids_dim1**2``). Log text is untrusted, so it is never handed to ``eval``
or sympy: this module accepts numbers, symbol names, ``+ - * / **``, unary signs,
parentheses and a few sympy functions (``Max``, ``Min``, ``floor``, ``ceiling``), and
nothing else. Arithmetic is exact (``fractions.Fraction``) so results round the same way
as sympy's.

Grammar (precedence climbing, Python's precedence and associativity)::

    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/") unary)*
    unary   := ("-" | "+") unary | power
    power   := atom ("**" unary)?
    atom    := NUMBER | NAME | FUNCTION "(" sum ("," sum)* ")" | "(" sum ")"
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from memopt.errors import MemoptError

__all__ = [
    "BinaryOp",
    "Call",
    "Expression",
    "ExpressionError",
    "Term",
    "Number",
    "Symbol",
    "UnaryMinus",
    "UnknownSymbolError",
    "parse_expression",
]

# ORT's unsimplified sums grow with depth (a 96-layer GPT: ~20,000 characters); the parser is
# linear in the text, so the cap only bounds what a hostile log can make it read.
MAX_TEXT_LENGTH = 1_000_000
# Larger powers and literals are never sizes and would let log text make evaluation
# arbitrarily slow.
MAX_EXPONENT = 64
_MAX_RESULT_BITS = 1_000_000
_MAX_LITERAL_EXPONENT = 400
_MAX_NESTING = 200


class ExpressionError(MemoptError):
    """The text is not a size expression this parser accepts, or cannot be evaluated."""


class UnknownSymbolError(MemoptError):
    """Evaluation needs symbols the caller gave no value for."""

    def __init__(self, missing: frozenset[str], expression: str) -> None:
        self.missing = missing
        names = ", ".join(sorted(missing))
        super().__init__(f"no value for {names} (needed by {expression}); give it with --dims {sorted(missing)[0]}=N")


@dataclass(frozen=True)
class Number:
    value: Fraction
    text: str


@dataclass(frozen=True)
class Symbol:
    name: str


@dataclass(frozen=True)
class UnaryMinus:
    operand: Term


@dataclass(frozen=True)
class BinaryOp:
    operator: str
    left: Term
    right: Term


@dataclass(frozen=True)
class Call:
    function: str
    arguments: tuple[Term, ...]


Term = Number | Symbol | UnaryMinus | BinaryOp | Call

_FUNCTIONS: dict[str, Callable[[list[Fraction]], Fraction]] = {
    "Max": max,
    "Min": min,
    "floor": lambda args: Fraction(math.floor(args[0])),
    "ceiling": lambda args: Fraction(math.ceil(args[0])),
}
_ARITY = {"Max": None, "Min": None, "floor": 1, "ceiling": 1}

# Binding power of each binary operator, and of unary minus (between * and **).
_BINARY_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "**": 4}
_UNARY_PRECEDENCE = 3

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<operator>\*\*|[-+*/(),])
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Expression:
    """A parsed expression: ``root`` is the syntax tree, ``text`` what was parsed."""

    root: Term
    text: str

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(node.name for node in _walk(self.root) if isinstance(node, Symbol))

    def evaluate(self, dims: Mapping[str, int | float]) -> float:
        """The value with each symbol replaced by ``dims[symbol]``."""
        return float(self.evaluate_exact(dims))

    def evaluate_exact(self, dims: Mapping[str, int | float]) -> Fraction:
        missing = self.symbols - dims.keys()
        if missing:
            raise UnknownSymbolError(frozenset(missing), self.text)
        values = {name: Fraction(value) for name, value in dims.items() if name in self.symbols}
        try:
            return _evaluate(self.root, values)
        except OverflowError:
            raise ExpressionError(f"{self.text} is too large to evaluate") from None

    def __str__(self) -> str:
        return _format(self.root, 0)


def parse_expression(text: str) -> Expression:
    """Parse ``text``; raises ``ExpressionError`` saying where it is malformed."""
    if len(text) > MAX_TEXT_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_TEXT_LENGTH} characters")
    parser = _Parser(text)
    root = parser.parse_sum(0)
    parser.expect_end()
    return Expression(root, text.strip())


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(_tokenize(text))
        self.position = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise ExpressionError(f"expression {self.text.strip()!r} ends too early")
        self.position += 1
        return token

    def expect(self, operator: str) -> None:
        kind, value = self.take()
        if (kind, value) != ("operator", operator):
            raise ExpressionError(f"expected {operator!r} but found {value!r} in {self.text.strip()!r}")

    def expect_end(self) -> None:
        token = self.peek()
        if token is not None:
            raise ExpressionError(f"unexpected {token[1]!r} in {self.text.strip()!r}")

    def parse_sum(self, depth: int) -> Term:
        if depth > _MAX_NESTING:
            raise ExpressionError("expression nested too deeply")
        node = self.parse_product(depth)
        while (token := self.peek()) is not None and token[1] in ("+", "-"):
            self.take()
            node = BinaryOp(token[1], node, self.parse_product(depth))
        return node

    def parse_product(self, depth: int) -> Term:
        node = self.parse_unary(depth)
        while (token := self.peek()) is not None and token[1] in ("*", "/"):
            self.take()
            node = BinaryOp(token[1], node, self.parse_unary(depth))
        return node

    def parse_unary(self, depth: int) -> Term:
        signs = 0
        while (token := self.peek()) is not None and token[1] in ("-", "+"):
            self.take()
            signs += token[1] == "-"
        node = self.parse_power(depth)
        return UnaryMinus(node) if signs % 2 else node

    def parse_power(self, depth: int) -> Term:
        base = self.parse_atom(depth)
        token = self.peek()
        if token is not None and token[1] == "**":
            self.take()
            return BinaryOp("**", base, self.parse_unary(depth + 1))
        return base

    def parse_atom(self, depth: int) -> Term:
        kind, value = self.take()
        if kind == "number":
            exponent = value.lower().partition("e")[2]
            if exponent and abs(int(exponent)) > _MAX_LITERAL_EXPONENT:
                raise ExpressionError(f"number {value!r} is out of range")
            return Number(Fraction(value), value)
        if kind == "name":
            token = self.peek()
            if token is None or token[1] != "(":
                return Symbol(value)
            if value not in _FUNCTIONS:
                raise ExpressionError(f"unsupported function {value!r} in {self.text.strip()!r}")
            self.take()
            arguments = [self.parse_sum(depth + 1)]
            while (token := self.peek()) is not None and token[1] == ",":
                self.take()
                arguments.append(self.parse_sum(depth + 1))
            self.expect(")")
            arity = _ARITY[value]
            if arity is not None and len(arguments) != arity:
                raise ExpressionError(f"{value} takes {arity} argument, got {len(arguments)} in {self.text.strip()!r}")
            return Call(value, tuple(arguments))
        if value == "(":
            node = self.parse_sum(depth + 1)
            self.expect(")")
            return node
        raise ExpressionError(f"unexpected {value!r} in {self.text.strip()!r}")


def _tokenize(text: str) -> Iterator[tuple[str, str]]:
    position = 0
    end = len(text.rstrip())
    while position < end:
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            bad = text[position:].strip()[:20]
            raise ExpressionError(f"unexpected character {bad[:1]!r} in {text.strip()!r}")
        kind = match.lastgroup
        assert kind is not None
        yield kind, match.group(kind)
        position = match.end()


def _walk(node: Term) -> Iterator[Term]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, UnaryMinus):
            stack.append(current.operand)
        elif isinstance(current, BinaryOp):
            stack.extend((current.left, current.right))
        elif isinstance(current, Call):
            stack.extend(current.arguments)


def _evaluate(node: Term, values: Mapping[str, Fraction]) -> Fraction:
    if isinstance(node, Number):
        return node.value
    if isinstance(node, Symbol):
        return values[node.name]
    if isinstance(node, UnaryMinus):
        return -_evaluate(node.operand, values)
    if isinstance(node, Call):
        return _FUNCTIONS[node.function]([_evaluate(argument, values) for argument in node.arguments])
    left = _evaluate(node.left, values)
    right = _evaluate(node.right, values)
    if node.operator == "+":
        return left + right
    if node.operator == "-":
        return left - right
    if node.operator == "*":
        return left * right
    if node.operator == "/":
        if right == 0:
            raise ExpressionError("division by zero")
        return left / right
    return _power(left, right)


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if abs(exponent) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {exponent} is out of range (at most {MAX_EXPONENT})")
    if base == 0 and exponent < 0:
        raise ExpressionError("division by zero")
    if exponent.denominator == 1:
        bits = max(base.numerator.bit_length(), base.denominator.bit_length())
        if bits * abs(exponent) > _MAX_RESULT_BITS:
            raise ExpressionError(f"power {base}**{exponent} is too large")
        return base ** int(exponent)
    if base < 0:
        raise ExpressionError(f"fractional power of a negative number ({base}**{exponent})")
    return Fraction(float(base) ** float(exponent))


def _format(node: Term, context: int) -> str:
    """Text for ``node`` inside an operator of binding power ``context``."""
    if isinstance(node, Number):
        return node.text
    if isinstance(node, Symbol):
        return node.name
    if isinstance(node, Call):
        return f"{node.function}({', '.join(_format(argument, 0) for argument in node.arguments)})"
    if isinstance(node, UnaryMinus):
        operand = _format(node.operand, _UNARY_PRECEDENCE)
        # "--a" would read back as a single sign.
        text = f"-({operand})" if isinstance(node.operand, UnaryMinus) else "-" + operand
        # Only the base of a power binds tighter than a sign: (-a)**2 is not -a**2.
        return f"({text})" if context > _UNARY_PRECEDENCE else text
    precedence = _BINARY_PRECEDENCE[node.operator]
    if node.operator == "**":
        # Right-associative: only the left operand needs parentheses at equal precedence.
        text = f"{_format(node.left, precedence + 1)}**{_format(node.right, _UNARY_PRECEDENCE)}"
    else:
        separator = f" {node.operator} " if precedence == 1 else node.operator
        text = f"{_format(node.left, precedence)}{separator}{_format(node.right, precedence + 1)}"
    return f"({text})" if precedence < context else text
