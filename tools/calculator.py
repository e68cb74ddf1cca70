"""Arithmetic on a parsed expression tree, in exact decimals; never `eval`.

Grammar (lowest to highest precedence):
    sum     := term (("+" | "-") term)*
    term    := unary (("*" | "/" | "//" | "%" | "of") unary)*
    unary   := ("-" | "+") unary | power
    power   := postfix ("**" unary)?          right-associative, as in Python
    postfix := primary "%"*                   "17.5%" is 0.175 when no operand follows
    primary := NUMBER | NAME "(" args ")" | "(" sum ")"
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import (
    ROUND_FLOOR,
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    DivisionByZero,
    InvalidOperation,
    Overflow,
    localcontext,
)

MAX_LENGTH = 300
MAX_DEPTH = 32
MAX_DIGITS = 40
MAX_EXPONENT = 1000
# Shown digits: fewer than the working precision, so 'sqrt(2) * sqrt(2)' shows as 2.
SHOWN_DIGITS = 28
_CONTEXT = Context(prec=MAX_DIGITS, Emax=999, Emin=-999, traps=[DivisionByZero, Overflow])
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|([A-Za-z_]\w*)|(\*\*|//|[-+*/%(),]))")


class CalculatorError(ValueError):
    """The expression cannot be evaluated; the message says why and what to write instead."""


@dataclass(slots=True)
class Num:
    value: Decimal


@dataclass(slots=True)
class Percent:
    operand: Node


@dataclass(slots=True)
class Neg:
    operand: Node


@dataclass(slots=True)
class BinOp:
    op: str
    left: Node
    right: Node


@dataclass(slots=True)
class Call:
    name: str
    args: list[Node]


Node = Num | Percent | Neg | BinOp | Call


def evaluate(expression: str) -> str:
    """The value of `expression` as plain decimal text, e.g. `"409.5"`."""
    tree = parse(expression)
    with localcontext(_CONTEXT):
        try:
            return _format(_eval(tree))
        except DivisionByZero as exc:
            raise CalculatorError("division by zero") from exc
        except Overflow as exc:
            raise CalculatorError("the result is too large (over 1e999)") from exc
        except InvalidOperation as exc:
            raise CalculatorError("the operation is undefined for these numbers") from exc


def parse(expression: str) -> Node:
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(
            f"the expression is {len(expression)} characters long; the limit is {MAX_LENGTH}"
        )
    if not expression.strip():
        raise CalculatorError("the expression is empty; write something like '2 * (3 + 4)'")
    return _Parser(_tokenize(expression)).parse()


def _tokenize(text: str) -> list[str]:
    tokens, pos, end = [], 0, len(text.rstrip())
    while pos < end:
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            bad = text[pos:].lstrip()[:1]
            raise CalculatorError(
                f"unexpected character {bad!r}: use numbers, + - * / // % ** ( ) and "
                "round, min, max, abs, sqrt (no thousands separators)"
            )
        token = match.group(match.lastindex)
        if match.lastindex == 2 and token not in FUNCTIONS and token != "of":
            raise CalculatorError(
                f"unknown name {token!r}: the functions are {', '.join(FUNCTIONS)}; "
                "variables and other names are not supported"
            )
        tokens.append(token)
        pos = match.end()
    return tokens


def _is_number(token: str | None) -> bool:
    return token is not None and (token[0].isdigit() or token[0] == ".")


def _starts_operand(token: str | None) -> bool:
    return token is not None and (
        _is_number(token) or token == "(" or (token[0].isalpha() and token != "of")
    )


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def peek(self, ahead: int = 0) -> str | None:
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise CalculatorError("the expression ends too early; is an operand missing?")
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        got = self.peek()
        if got != token:
            raise CalculatorError(f"expected {token!r} but found {got or 'the end'!r}")
        self.pos += 1

    def parse(self) -> Node:
        node = self.sum()
        extra = self.peek()
        if extra is not None:
            hint = "; write numbers without thousands separators" if extra == "," else ""
            raise CalculatorError(f"unexpected {extra!r} after a complete expression{hint}")
        return node

    def sum(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            node = BinOp(op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek() in ("*", "/", "//", "%", "of"):
            op = self.take()
            if op == "of" and not isinstance(node, Percent):
                raise CalculatorError("'of' must follow a percentage, as in '15% of 80'")
            node = BinOp("*" if op == "of" else op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek() in ("-", "+"):
            op = self.take()
            with self.nested():
                operand = self.unary()
            return Neg(operand) if op == "-" else operand
        return self.power()

    def power(self) -> Node:
        base = self.postfix()
        if self.peek() == "**":
            self.take()
            with self.nested():
                return BinOp("**", base, self.unary())
        return base

    def postfix(self) -> Node:
        node = self.primary()
        # A '%' followed by an operand is modulo (handled in term); otherwise it is percent.
        while self.peek() == "%" and not _starts_operand(self.peek(1)):
            self.take()
            node = Percent(node)
        return node

    def primary(self) -> Node:
        token = self.take()
        if _is_number(token):
            return _number(token)
        if token == "(":
            with self.nested():
                node = self.sum()
            self.expect(")")
            return node
        if token in FUNCTIONS:
            return self.call(token)
        raise CalculatorError(f"unexpected {token!r}; an operand is missing before it")

    def call(self, name: str) -> Node:
        self.expect("(")
        args: list[Node] = []
        with self.nested():
            while self.peek() != ")":
                args.append(self.sum())
                if self.peek() != ")":
                    self.expect(",")
        self.expect(")")
        return Call(name, args)

    def nested(self) -> _Depth:
        return _Depth(self)


class _Depth:
    def __init__(self, parser: _Parser) -> None:
        self.parser = parser

    def __enter__(self) -> None:
        self.parser.depth += 1
        if self.parser.depth > MAX_DEPTH:
            raise CalculatorError(f"the expression is nested more than {MAX_DEPTH} levels deep")

    def __exit__(self, *exc: object) -> None:
        self.parser.depth -= 1


def _number(token: str) -> Num:
    digits = token.replace(".", "").lstrip("0")
    if len(digits) > MAX_DIGITS:
        raise CalculatorError(f"numbers may have at most {MAX_DIGITS} significant digits")
    return Num(Decimal(token))


def _eval(node: Node) -> Decimal:
    match node:
        case Num(value):
            return value
        case Percent(operand):
            return _eval(operand) / 100
        case Neg(operand):
            return -_eval(operand)
        case BinOp(op, left, right):
            return _binary(op, _eval(left), _eval(right))
        case Call(name, args):
            return FUNCTIONS[name]([_eval(arg) for arg in args])
    raise AssertionError(f"unknown node {node!r}")


def _binary(op: str, a: Decimal, b: Decimal) -> Decimal:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    if op == "//":
        return _floordiv(a, b)
    if op == "%":
        return a - b * _floordiv(a, b)
    return _power(a, b)


def _floordiv(a: Decimal, b: Decimal) -> Decimal:
    # Python's floor semantics (-7 // 2 == -4), not Decimal's truncation.
    return (a / b).to_integral_value(rounding=ROUND_FLOOR)


def _power(base: Decimal, exponent: Decimal) -> Decimal:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponents are limited to {MAX_EXPONENT}; {exponent} is too large")
    if base < 0 and exponent != exponent.to_integral_value():
        raise CalculatorError("a negative number has no real fractional power")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    return base**exponent


def _arity(name: str, args: list[Decimal], low: int, high: int) -> None:
    if not low <= len(args) <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise CalculatorError(f"{name}() takes {want} arguments, got {len(args)}")


def _round(args: list[Decimal]) -> Decimal:
    _arity("round", args, 1, 2)
    places = args[1] if len(args) == 2 else Decimal(0)
    if places != places.to_integral_value() or not 0 <= places <= 20:
        raise CalculatorError("round(x, n) needs a whole number of places n from 0 to 20")
    return args[0].quantize(Decimal(1).scaleb(-int(places)), rounding=ROUND_HALF_EVEN)


def _sqrt(args: list[Decimal]) -> Decimal:
    _arity("sqrt", args, 1, 1)
    if args[0] < 0:
        raise CalculatorError("sqrt() of a negative number is not a real number")
    return args[0].sqrt()


def _extreme(pick: Callable[..., Decimal], name: str) -> Callable[[list[Decimal]], Decimal]:
    def apply(args: list[Decimal]) -> Decimal:
        _arity(name, args, 1, 50)
        return pick(args)

    return apply


def _abs(args: list[Decimal]) -> Decimal:
    _arity("abs", args, 1, 1)
    return abs(args[0])


FUNCTIONS: dict[str, Callable[[list[Decimal]], Decimal]] = {
    "round": _round,
    "min": _extreme(min, "min"),
    "max": _extreme(max, "max"),
    "abs": _abs,
    "sqrt": _sqrt,
}


def _format(value: Decimal) -> str:
    value = Context(prec=SHOWN_DIGITS).plus(value)
    if value.is_zero():
        return "0"
    if -20 <= value.adjusted() < SHOWN_DIGITS:
        text = format(value, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return format(value.normalize(), "e")
