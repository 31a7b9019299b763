"""The hyperparameter constants of a train.py, with where each value sits in the source: every
number set at module level under an UPPER_CASE name (`NAME = <number>` or `NAME: type = <number>`),
the value a number or an arithmetic expression of numbers (`2**19`, `40 * 524288`), and the knobs
set inside such an assignment, named by their path:
- an entry of a dict literal: `DEVICE_SETTINGS["cuda"]` (an int key: `LAYERS[0]`);
- a keyword argument of a call: `DEVICE_SETTINGS["cuda"].width` for
  `DEVICE_SETTINGS = {"cuda": DeviceSettings(width=512, ...)}`, `OPTIMIZER.lr` for
  `OPTIMIZER = Adam(lr=3e-4)`;
- an element of a tuple or list literal: `ADAM_BETAS[1]` for `ADAM_BETAS = (0.8, 0.95)`;
nested as deep as the literal goes.
A knob set per device is one knob per device.

Shared by the random agent (which rewrites their values, agent/mutation.py) and the server (which
tells what a change set, server/trainpy/changes.py).
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

_UPPER_CASE = re.compile(r"[A-Z][A-Z0-9_]*\Z")
NEWLINE = re.compile(r"\r\n|\r|\n")  # the line ends Python's tokenizer counts for ast positions

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


@dataclass(frozen=True)
class Constant:
    """A constant (or a knob, by its path) and where its value expression sits in the source."""

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
    starts.extend(match.end() for match in NEWLINE.finditer(source))
    return starts


def _offset(source: str, starts: list[int], lineno: int, col_utf8: int) -> int:
    """Character offset of an ast position (1-based line, UTF-8 byte column)."""
    line_start = starts[lineno - 1]
    line = source[line_start : line_start + col_utf8]  # a character is at least one byte
    return line_start + len(line.encode("utf-8")[:col_utf8].decode("utf-8"))


MAX_NAME_CHARS = 200  # as stored (server/models.py); a longer path is not a hyperparameter


# A knob's path, written once here: `.arg` for a keyword argument, `[key]` (JSON) for a dict entry.
STEP_STARTS = (".", "[")


def argument_step(arg: str) -> str:
    return f".{arg}"


def entry_step(key: str | int) -> str:
    return f"[{json.dumps(key)}]"


_LAST_STEP = re.compile(r'\.(?P<arg>\w+)\Z|\[(?P<key>"(?:[^"\\]|\\.)*"|-?[0-9]+)\]\Z')
# The device types a knob's path can select (`DEVICE_SETTINGS["cuda"].width`): train.py picks
# its settings by `ctx.device.type`, so only the knobs of the platform's own device change its runs.
DEVICE_TYPES = ("cpu", "cuda", "mps")
_DEVICE_STEP = re.compile("|".join(re.escape(entry_step(device)) for device in DEVICE_TYPES))


def knob_device(name: str) -> str | None:
    """The device type a knob's path selects (its first entry keyed by one), None for any other."""
    found = _DEVICE_STEP.search(name)
    return None if found is None else str(json.loads(found.group()[1:-1]))


def counts_on(name: str, device: str | None) -> bool:
    """Whether setting `name` can change a run on `device` (a device type; None: unknown, all count):
    a plain constant or a knob of no device always, a knob of one device only on that device."""
    selected = knob_device(name)
    return device is None or selected is None or selected == device


def _last_step(name: str) -> tuple[str, str] | None:
    """("arg", the keyword) or ("key", the JSON key) of a knob's path; None for a plain constant."""
    found = _LAST_STEP.search(name)
    if found is None:
        return None
    return ("arg", found["arg"]) if found["arg"] is not None else ("key", found["key"])


def assignment_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """A line that sets one of these constants: `NAME = ...` or `NAME: type = ...` at its start; for
    a knob, its keyword argument (`width=...`) or dict entry (`"cpu": ...`) anywhere in it, and
    for an element (`ADAM_BETAS[1]`) also the line that sets its tuple or list. None for no names."""
    patterns = [pattern for name in names for pattern in _setting(name)]
    return re.compile("|".join(patterns)) if patterns else None


def _setting(name: str) -> list[str]:
    """The patterns of `assignment_pattern` for one constant or knob."""
    match _last_step(name):
        case None:
            return [rf"^{re.escape(name)} ?(?::[^=]*)?=(?!=)"]
        case ("arg", arg):
            return [rf"\b{re.escape(arg)} ?=(?!=)"]
        case (_, key) if key.isdigit():  # an int key, or an element set where its sequence is
            return [rf"{re.escape(key)} ?:", *_setting(name[: -len(key) - 2])]
        case (_, key):
            return [rf"{re.escape(key)} ?:"]


def _knobs(name: str, node: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """(path, expression) of everything set under `name`: the expression itself, or, for a dict
    literal, its entries with string or int keys, for a call its keyword arguments, and for a
    tuple or list its elements, nested."""
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str | int)
                and not isinstance(key.value, bool)
            ):
                yield from _knobs(name + entry_step(key.value), value)
    elif isinstance(node, ast.Call):
        for keyword in node.keywords:
            if keyword.arg is not None:  # not **kwargs
                yield from _knobs(name + argument_step(keyword.arg), keyword.value)
    elif isinstance(node, ast.Tuple | ast.List):
        for index, element in enumerate(node.elts):
            yield from _knobs(name + entry_step(index), element)
    else:
        yield name, node


def find_constants(source: str) -> list[Constant]:
    """The constants of `source` in file order. Raises SyntaxError if it does not parse."""
    return constants_in(ast.parse(source), source)


def constants_in(tree: ast.Module, source: str) -> list[Constant]:
    """The constants of `source`, parsed already as `tree`, in file order."""
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
        for name, node in _knobs(target.id, value_node):
            value = _evaluate(node)
            if value is None or len(name) > MAX_NAME_CHARS:
                continue
            assert node.end_lineno is not None and node.end_col_offset is not None
            found.append(
                Constant(
                    name=name,
                    value=value,
                    start=_offset(source, starts, node.lineno, node.col_offset),
                    end=_offset(source, starts, node.end_lineno, node.end_col_offset),
                    power_form=_is_power_form(node),
                )
            )
    return found
