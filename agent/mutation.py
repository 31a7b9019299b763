"""Random mutation of the hyperparameter constants at the top level of `train.py`.

A constant is a module-level assignment `NAME = <number>` (or `NAME: type = <number>`) where NAME
is UPPER_CASE and the value is a number or an arithmetic expression of numbers (`2**19`,
`40 * 524288`). Only the text of the chosen values is rewritten, so comments, formatting and the
rest of the file stay byte for byte the same.

How a value moves (so that a random walk stays in sensible territory):
- a power-of-two int (batch sizes, widths, head counts) doubles or halves and stays a power of two;
- any other int is scaled by a log-uniform factor in [1/2, 2], stays an int and keeps its sign;
- a float strictly between 0 and 1 (learning rates, betas, ratios) moves in logit space, so it
  stays strictly between 0 and 1;
- any other float is scaled by a log-uniform factor in [1/2, 2] and keeps its sign;
- zero is left alone: it usually means "off", and scaling cannot move it.
"""

from __future__ import annotations

import ast
import math
import operator
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

_UPPER_CASE = re.compile(r"[A-Z][A-Z0-9_]*\Z")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line ends Python's tokenizer counts for ast positions

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
# Larger numbers are not hyperparameters; refusing them keeps evaluation cheap and finite.
_MAX_EXPONENT = 64
_MAX_MAGNITUDE = 1e300
_SCALE = math.log(2.0)  # log-uniform factor range [1/2, 2]
_LOGIT_STEP = 1.0  # a uniform step in logit space: 0.5 -> [0.27, 0.73], 0.95 -> [0.88, 0.98]
_SIGNIFICANT_DIGITS = 3
_SECOND_CHANGE_PROBABILITY = 0.3  # usually one change at a time, sometimes two together


class NoConstantsError(ValueError):
    """The source has no top-level UPPER_CASE numeric constant that can be mutated."""


@dataclass(frozen=True)
class Constant:
    """A mutable top-level constant and where its value expression sits in the source."""

    name: str
    value: int | float
    start: int  # character offsets of the value expression
    end: int
    power_form: bool  # written as `2**k`: the mutation keeps that spelling


def _evaluate(node: ast.expr) -> int | float | None:
    """The value of a constant arithmetic expression of numbers, None for anything else."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _evaluate(node.operand)
        if inner is None:
            return None
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Pow) and (abs(right) > _MAX_EXPONENT or (left == 0 and right < 0)):
            return None
        try:
            result = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError):
            return None
        if isinstance(result, complex) or abs(result) > _MAX_MAGNITUDE:
            return None
        return result
    return None


def _is_power_form(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Pow)
        and isinstance(node.left, ast.Constant)
        and node.left.value == 2
        and type(node.left.value) is int
        and isinstance(node.right, ast.Constant)
        and type(node.right.value) is int
    )


def _line_starts(source: str) -> list[int]:
    starts = [0]
    starts.extend(match.end() for match in _NEWLINE.finditer(source))
    return starts


def _offset(source: str, starts: list[int], lineno: int, col_utf8: int) -> int:
    """Character offset of an ast position (1-based line, UTF-8 byte column)."""
    line_start = starts[lineno - 1]
    line = source[line_start : line_start + col_utf8]  # a character is at least one byte
    return line_start + len(line.encode("utf-8")[:col_utf8].decode("utf-8"))


def find_constants(source: str) -> list[Constant]:
    """The mutable constants of `source` in file order. Raises SyntaxError if it does not parse."""
    tree = ast.parse(source)
    starts = _line_starts(source)
    found: list[Constant] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value_node = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value_node = stmt.target, stmt.value
        else:
            continue
        if not isinstance(target, ast.Name) or not _UPPER_CASE.match(target.id):
            continue
        value = _evaluate(value_node)
        if value is None or value == 0:
            continue
        assert value_node.end_lineno is not None and value_node.end_col_offset is not None
        found.append(
            Constant(
                name=target.id,
                value=value,
                start=_offset(source, starts, value_node.lineno, value_node.col_offset),
                end=_offset(source, starts, value_node.end_lineno, value_node.end_col_offset),
                power_form=_is_power_form(value_node),
            )
        )
    return found


def _mutate_int(value: int, power_form: bool, rng: random.Random) -> str:
    magnitude, sign = abs(value), (-1 if value < 0 else 1)
    if magnitude & (magnitude - 1) == 0:  # a power of two: step the exponent
        exponent = magnitude.bit_length() - 1
        exponent = 1 if exponent == 0 else exponent + rng.choice((-1, 1))
        if power_form:
            return f"-2**{exponent}" if sign < 0 else f"2**{exponent}"
        return str(sign * 2**exponent)
    exact = magnitude * math.exp(rng.uniform(-_SCALE, _SCALE))
    # Three significant digits: 11091083 reads as noise, 11100000 as a choice.
    scaled = max(1, int(round(exact, min(0, _SIGNIFICANT_DIGITS - len(str(round(exact)))))))
    if scaled == magnitude:
        scaled = magnitude + rng.choice((-1, 1))
    return str(sign * scaled)


def _sigmoid(logit: float) -> float:
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    small = math.exp(logit)  # this form cannot overflow for very negative logits
    return small / (1.0 + small)


def _float_literal(proposal: float, accept: Callable[[float], bool]) -> str | None:
    """A short float literal for `proposal` whose value `accept`s, or None if none is."""
    for text in (f"{proposal:.3g}", repr(proposal)):
        if not any(mark in text for mark in ".eE"):
            text += ".0"  # "2" would be an int literal; the constant must stay a float
        if accept(float(text)):
            return text
    return None


def _mutate_float(value: float, rng: random.Random) -> str:
    if 0.0 < value < 1.0:
        logit = math.log(value) - math.log1p(-value)

        def propose() -> float:
            return _sigmoid(logit + rng.uniform(-_LOGIT_STEP, _LOGIT_STEP))

        def accept(new: float) -> bool:
            return new != value and 0.0 < new < 1.0

    else:

        def propose() -> float:
            return value * math.exp(rng.uniform(-_SCALE, _SCALE))

        def accept(new: float) -> bool:
            return new != value and math.isfinite(new) and new != 0 and (new > 0) == (value > 0)

    while True:  # a proposal that leaves the bounds or rounds back to `value` is drawn again
        proposal = propose()
        text = _float_literal(proposal, accept) if math.isfinite(proposal) else None
        if text is not None:
            return text


def _mutate(constant: Constant, rng: random.Random) -> str:
    if isinstance(constant.value, int):
        return _mutate_int(constant.value, constant.power_form, rng)
    return _mutate_float(constant.value, rng)


def mutate_constants(source: str, rng: random.Random) -> tuple[str, str]:
    """Change one (sometimes two) top-level constants of `source`.

    Returns the new source and a one-line description such as `DEPTH 8 -> 16`.
    Raises SyntaxError if `source` does not parse and NoConstantsError if it has nothing to mutate.
    """
    constants = find_constants(source)
    if not constants:
        raise NoConstantsError(
            "train.py has no top-level UPPER_CASE numeric constant to mutate "
            "(the random agent changes lines like `LEARNING_RATE = 3e-4`)"
        )
    count = 2 if len(constants) > 1 and rng.random() < _SECOND_CHANGE_PROBABILITY else 1
    chosen = sorted(rng.sample(constants, count), key=lambda constant: constant.start)
    pieces: list[str] = []
    changes: list[str] = []
    position = 0
    for constant in chosen:
        new_text = _mutate(constant, rng)
        pieces += [source[position : constant.start], new_text]
        position = constant.end
        changes.append(f"{constant.name} {source[constant.start : constant.end]} -> {new_text}")
    pieces.append(source[position:])
    return "".join(pieces), ", ".join(changes)
