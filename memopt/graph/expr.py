"""Symbolic size expressions from ORT logs, parsed by a whitelist grammar.

ORT prints memory savings and tensor sizes as sympy-style text
(``16384.0*ids_dim0*ids_dim1``, ``((input_ids_dim0)*(input_ids_dim1)*(64))``,
``64.0*ids_dim0*ids_dim1**2``). Log text is untrusted, so it is never handed to ``eval``
or sympy: this module accepts numbers, symbol names, ``+ - * / **``, unary signs,
parentheses and a few sympy functions (``Max``, ``Min``, ``floor``, ``ceiling``), and
nothing else. Arithmetic is exact (``fractions.Fraction``) so results round the same way
as sympy's.

Grammar (Python's precedence and associativity; read by an operator-precedence parser
with explicit stacks, so no input recurses)::

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
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TypeVar

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
    "fold",
    "format_term",
    "parse_expression",
]

# ORT's unsimplified sums grow with depth (a 96-layer GPT: ~20,000 characters, ~5,000
# tokens); parsing, evaluating and formatting are iterative and linear in the tokens, so the
# caps only bound what a hostile log can make memopt do per expression.
MAX_TEXT_LENGTH = 1_000_000
MAX_TOKENS = 20_000
# Larger powers, literals and values are never sizes and would let log text make
# evaluation arbitrarily slow.
MAX_EXPONENT = 64
MAX_VALUE_BITS = 4096
_MAX_LITERAL_EXPONENT = 400
_MAX_LITERAL_DIGITS = 400

_R = TypeVar("_R")


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
        (?P<number>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<operator>\*\*|[-+*/(),])
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Expression:
    """A parsed expression: ``root`` is the syntax tree, ``text`` what was parsed.

    Two expressions compare (and hash) by their text; the tree, which can be thousands of
    nodes deep, takes no part in comparisons or ``repr``.
    """

    root: Term = field(compare=False, repr=False)
    text: str

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(node.name for node in _walk(self.root) if isinstance(node, Symbol))

    def evaluate(self, dims: Mapping[str, int | float]) -> float:
        """The value with each symbol replaced by ``dims[symbol]``."""
        value = self.evaluate_exact(dims)
        try:
            return float(value)
        except OverflowError:
            raise ExpressionError(f"{_brief(self.text)} is too large to evaluate") from None

    def evaluate_exact(self, dims: Mapping[str, int | float]) -> Fraction:
        missing = self.symbols - dims.keys()
        if missing:
            raise UnknownSymbolError(frozenset(missing), _brief(self.text))
        try:
            values = {name: Fraction(value) for name, value in dims.items() if name in self.symbols}
        except (OverflowError, ValueError):
            raise ExpressionError(f"a dim value for {_brief(self.text)} is not a finite number") from None
        return fold(self.root, lambda leaf: _leaf_value(leaf, values), _combine_values)

    def __str__(self) -> str:
        return format_term(self.root)


def parse_expression(text: str) -> Expression:
    """Parse ``text``; raises ``ExpressionError`` saying where it is malformed."""
    if len(text) > MAX_TEXT_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_TEXT_LENGTH:,} characters")
    tokens = list(_tokenize(text))
    if len(tokens) > MAX_TOKENS:
        raise ExpressionError(f"expression of {len(tokens):,} tokens: memopt reads at most {MAX_TOKENS:,}")
    return Expression(_Parser(text, tokens).parse(), text.strip())


def fold(root: Term, leaf: Callable[[Term], _R], combine: Callable[[Term, list[_R]], _R]) -> _R:
    """Bottom-up evaluation of the tree without recursion: ``leaf`` for numbers and symbols,
    ``combine`` for an operator or call given its operands' results in order."""
    results: list[_R] = []
    stack: list[tuple[Term, bool]] = [(root, False)]
    while stack:
        node, operands_done = stack.pop()
        children = _children(node)
        if not children:
            results.append(leaf(node))
        elif operands_done:
            operands = results[-len(children) :]
            del results[-len(children) :]
            results.append(combine(node, operands))
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children))
    return results[0]


def format_term(root: Term) -> str:
    """The text of ``root`` with only the parentheses it needs (reads back to the same tree)."""
    pieces: list[str] = []
    stack: list[tuple[Term, int] | str] = [(root, 0)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            pieces.append(item)
            continue
        node, context = item
        if isinstance(node, Number):
            pieces.append(node.text)
        elif isinstance(node, Symbol):
            pieces.append(node.name)
        else:
            # Pushed in reverse: the stack pops them in reading order.
            stack.extend(reversed(_format_parts(node, context)))
    return "".join(pieces)


def _format_parts(node: UnaryMinus | BinaryOp | Call, context: int) -> list[tuple[Term, int] | str]:
    """The pieces of ``node`` inside an operator of binding power ``context``."""
    parts: list[tuple[Term, int] | str]
    if isinstance(node, Call):
        parts = [f"{node.function}("]
        for index, argument in enumerate(node.arguments):
            parts.extend([", "] if index else [])
            parts.append((argument, 0))
        return [*parts, ")"]
    if isinstance(node, UnaryMinus):
        # "--a" would read back as a single sign.
        operand: list[tuple[Term, int] | str] = [(node.operand, _UNARY_PRECEDENCE)]
        parts = ["-", *(["(", *operand, ")"] if isinstance(node.operand, UnaryMinus) else operand)]
        # Only the base of a power binds tighter than a sign: (-a)**2 is not -a**2.
        return ["(", *parts, ")"] if context > _UNARY_PRECEDENCE else parts
    precedence = _BINARY_PRECEDENCE[node.operator]
    if node.operator == "**":
        # Right-associative: only the left operand needs parentheses at equal precedence.
        parts = [(node.left, precedence + 1), "**", (node.right, _UNARY_PRECEDENCE)]
    else:
        separator = f" {node.operator} " if precedence == 1 else node.operator
        parts = [(node.left, precedence), separator, (node.right, precedence + 1)]
    return ["(", *parts, ")"] if precedence < context else parts


def _brief(text: str) -> str:
    """``text`` short enough for a one-line message."""
    text = text.strip()
    return text if len(text) <= 80 else f"{text[:60]}… ({len(text):,} characters)"


@dataclass(frozen=True)
class _Frame:
    """An open parenthesis, or a function call and how many arguments it has so far."""

    function: str | None
    arguments: int = 1


_NEGATE = "neg"
_Pending = str | _Frame  # a binary operator, _NEGATE, or an open frame


class _Parser:
    """Operator precedence with an operand stack and an operator stack (Dijkstra's
    shunting yard): every token is handled once, whatever the nesting."""

    def __init__(self, text: str, tokens: list[tuple[str, str]]) -> None:
        self.text = text
        self.tokens = tokens
        self.operands: list[Term] = []
        self.pending: list[_Pending] = []

    def parse(self) -> Term:
        expect_operand = True
        negate = False
        index = 0
        while index < len(self.tokens):
            kind, value = self.tokens[index]
            index += 1
            if expect_operand:
                if kind == "operator" and value in ("+", "-"):
                    negate ^= value == "-"
                    continue
                if negate:
                    self.pending.append(_NEGATE)
                    negate = False
                if kind == "number":
                    self.operands.append(_number(value))
                    expect_operand = False
                elif kind == "name" and index < len(self.tokens) and self.tokens[index][1] == "(":
                    if value not in _FUNCTIONS:
                        raise ExpressionError(f"unsupported function {value!r} in {_brief(self.text)!r}")
                    self.pending.append(_Frame(value))
                    index += 1
                elif kind == "name":
                    self.operands.append(Symbol(value))
                    expect_operand = False
                elif value == "(":
                    self.pending.append(_Frame(None))
                else:
                    raise self._unexpected(value)
            elif value in _BINARY_PRECEDENCE:
                self._reduce_before(value)
                self.pending.append(value)
                expect_operand = True
            elif value == ",":
                frame = self._close_to_frame(value)
                if frame.function is None:
                    raise self._unexpected(value)
                self.pending.append(_Frame(frame.function, frame.arguments + 1))
                expect_operand = True
            elif value == ")":
                frame = self._close_to_frame(value)
                if frame.function is not None:
                    self._call(frame)
            else:
                raise self._unexpected(value)
        if expect_operand:
            raise ExpressionError(f"expression {_brief(self.text)!r} ends too early")
        while self.pending:
            top = self.pending.pop()
            if isinstance(top, _Frame):
                raise ExpressionError(f"expected ')' but {_brief(self.text)!r} ends")
            self._apply(top)
        (root,) = self.operands
        return root

    def _unexpected(self, value: str) -> ExpressionError:
        return ExpressionError(f"unexpected {value!r} in {_brief(self.text)!r}")

    def _reduce_before(self, operator: str) -> None:
        """Apply the pending operators that bind tighter than ``operator`` (or as tight, left-associative)."""
        precedence = _BINARY_PRECEDENCE[operator]
        while self.pending and not isinstance(top := self.pending[-1], _Frame):
            top_precedence = _UNARY_PRECEDENCE if top == _NEGATE else _BINARY_PRECEDENCE[top]
            if top_precedence < precedence or (top_precedence == precedence and operator == "**"):
                return
            self._apply(self.pending.pop())  # type: ignore[arg-type]

    def _close_to_frame(self, closing: str) -> _Frame:
        while self.pending:
            top = self.pending.pop()
            if isinstance(top, _Frame):
                return top
            self._apply(top)
        raise self._unexpected(closing)

    def _apply(self, operator: str) -> None:
        if operator == _NEGATE:
            self.operands.append(UnaryMinus(self.operands.pop()))
            return
        right = self.operands.pop()
        self.operands.append(BinaryOp(operator, self.operands.pop(), right))

    def _call(self, frame: _Frame) -> None:
        assert frame.function is not None
        arity = _ARITY[frame.function]
        if arity is not None and frame.arguments != arity:
            raise ExpressionError(
                f"{frame.function} takes {arity} argument, got {frame.arguments} in {_brief(self.text)!r}"
            )
        arguments = tuple(self.operands[-frame.arguments :])
        del self.operands[-frame.arguments :]
        self.operands.append(Call(frame.function, arguments))


def _number(text: str) -> Number:
    mantissa, _, exponent = text.lower().partition("e")
    exponent_digits = exponent.lstrip("+-").lstrip("0")
    if (
        len(mantissa) > _MAX_LITERAL_DIGITS
        or len(exponent_digits) > 4
        or int(exponent_digits or 0) > _MAX_LITERAL_EXPONENT
    ):
        raise ExpressionError(f"number {_brief(text)!r} is out of range")
    return Number(Fraction(text), text)


def _tokenize(text: str) -> Iterator[tuple[str, str]]:
    position = 0
    end = len(text.rstrip())
    while position < end:
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            bad = text[position:].strip()[:1]
            raise ExpressionError(f"unexpected character {bad!r} in {_brief(text)!r}")
        kind = match.lastgroup
        assert kind is not None
        yield kind, match.group(kind)
        position = match.end()


def _children(node: Term) -> tuple[Term, ...]:
    if isinstance(node, UnaryMinus):
        return (node.operand,)
    if isinstance(node, BinaryOp):
        return (node.left, node.right)
    if isinstance(node, Call):
        return node.arguments
    return ()


def _walk(node: Term) -> Iterator[Term]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(_children(current))


def _leaf_value(node: Term, values: Mapping[str, Fraction]) -> Fraction:
    if isinstance(node, Number):
        return node.value
    assert isinstance(node, Symbol)
    return values[node.name]


def _combine_values(node: Term, operands: list[Fraction]) -> Fraction:
    if isinstance(node, UnaryMinus):
        return -operands[0]
    if isinstance(node, Call):
        result = _FUNCTIONS[node.function](operands)
    else:
        assert isinstance(node, BinaryOp)
        left, right = operands
        if node.operator == "+":
            result = left + right
        elif node.operator == "-":
            result = left - right
        elif node.operator == "*":
            result = left * right
        elif node.operator == "/":
            if right == 0:
                raise ExpressionError("division by zero")
            result = left / right
        else:
            result = _power(left, right)
    if max(result.numerator.bit_length(), result.denominator.bit_length()) > MAX_VALUE_BITS:
        raise ExpressionError(f"a value in the expression is out of range (over {MAX_VALUE_BITS} bits)")
    return result


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if abs(exponent) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {exponent} is out of range (at most {MAX_EXPONENT})")
    if base == 0 and exponent < 0:
        raise ExpressionError("division by zero")
    if exponent.denominator == 1:
        bits = max(base.numerator.bit_length(), base.denominator.bit_length())
        if bits * abs(exponent) > MAX_VALUE_BITS:
            raise ExpressionError(f"a power in the expression is out of range (over {MAX_VALUE_BITS} bits)")
        return base ** int(exponent)
    if base < 0:
        raise ExpressionError(f"fractional power of a negative number (exponent {exponent})")
    try:
        return Fraction(float(base) ** float(exponent))
    except (OverflowError, ValueError):
        raise ExpressionError("a power in the expression is out of range") from None
