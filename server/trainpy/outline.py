"""The outline of a train.py: where its top-level statements are, which function or class each line
sits in, and its constants. What server/trainpy/changes.py needs to summarise a change, at a fraction
of the cost of parsing both sources in full.

Parsing is most of a submission's CPU (docs/benchmarks.md, "API load": why a submission parses
only what changed), and a change is a few lines of one file that the server has parsed before. So:
- the base's outline is cached (`base_outline`: a submission's base is nearly always the best,
  the same for every submission until the best moves);
- the new source's outline is the base's, except for the top-level statements the change
  touched: only those are parsed (`outlines`). Everything outside them is the base's,
  line for line (the lines are identical), so the result is the outline of a full parse.
  When the changed statements do not parse on their own (a change that continues a statement
  above it, such as an added `else:`), the whole source is parsed.
"""

from __future__ import annotations

import ast
import re
import threading
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache

from protocol.constants import NEWLINE, constants_in

Number = int | float
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")  # a line and its end (protocol.constants.NEWLINE)
_PARSING = threading.Lock()


def _parse(source: str) -> ast.Module:
    """ast.parse, one thread at a time. In CPython 3.11 the ast module counts its recursion depth
    in state shared by all threads: when a garbage collection inside a parse runs Python code (a
    finalizer, a weakref callback) and another thread parses meanwhile, both parses fail with
    "SystemError: AST constructor recursion depth mismatch" (a submission and a rebase under
    bench/api_load.py answered 500; tests/server/test_outline.py reproduces it)."""
    with _PARSING:
        return ast.parse(source)


@dataclass(frozen=True)
class Outline:
    """Of a source that parses; lines are 1-based."""

    spans: tuple[tuple[int, int], ...]  # each top-level statement: first line (decorators too), last
    owners: dict[int, str]  # line -> its top-level function or class (`GPT.forward` for a method)
    constants: tuple[tuple[int, str, Number], ...]  # (line, name, value) in file order


def outline(source: str) -> Outline | None:
    """Of the whole source: None when it does not parse."""
    try:
        tree = _parse(source)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in the source
        return None
    return _of_tree(tree, source, 0)


@lru_cache(maxsize=16)
def base_outline(source: str) -> Outline | None:
    """`outline`, cached: the bases of submissions are few (see the module's docstring)."""
    return outline(source)


@dataclass(frozen=True)
class LineEdit:
    """Two sources as lines (with their line ends), and how many lines they share at each end;
    the base's text too, which keys its cached outline."""

    base_source: str
    base: list[str]
    new: list[str]
    head: int
    tail: int

    @classmethod
    def of(cls, base: str, new: str) -> LineEdit:
        base_lines, new_lines = split_lines(base), split_lines(new)
        head = _common_prefix(base_lines, new_lines)
        limit = min(len(base_lines), len(new_lines)) - head
        tail = _common_prefix(base_lines[::-1][:limit], new_lines[::-1][:limit])
        return cls(base, base_lines, new_lines, head, tail)


def outlines(edit: LineEdit) -> tuple[Outline | None, Outline | None]:
    """The outlines of `edit.base` (cached) and of `edit.new` (parsing only what changed); None
    for a source that does not parse, and for the new source when the base does not."""
    base_lines, new_lines, same_head = edit.base, edit.new, edit.head
    base_of = base_outline(edit.base_source)
    if base_of is None:
        return None, None
    last_changed = len(base_lines) - edit.tail  # of the base; below the first changed line on an insertion
    # The changed statements: from the last one that starts at or above the first changed line
    # to the first one that starts below the last changed line (exclusive).
    first = max((start for start, _end in base_of.spans if start <= same_head + 1), default=1)
    after = min((start for start, _end in base_of.spans if start > last_changed), default=len(base_lines) + 1)
    shift = len(new_lines) - len(base_lines)
    window = "".join(new_lines[first - 1 : after - 1 + shift])
    try:
        tree = _parse(window)
    except (SyntaxError, ValueError):
        return base_of, outline("".join(new_lines))
    if first > 1 and any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in tree.body):
        return base_of, outline("".join(new_lines))  # allowed at the top only: the whole source decides
    middle = _of_tree(tree, window, first - 1)
    return base_of, Outline(
        spans=(
            *(span for span in base_of.spans if span[0] < first),
            *middle.spans,
            *((start + shift, end + shift) for start, end in base_of.spans if start >= after),
        ),
        owners={
            **{line: name for line, name in base_of.owners.items() if line < first},
            **middle.owners,
            **{line + shift: name for line, name in base_of.owners.items() if line >= after},
        },
        constants=(
            *(c for c in base_of.constants if c[0] < first),
            *middle.constants,
            *((line + shift, name, value) for line, name, value in base_of.constants if line >= after),
        ),
    )


def split_lines(source: str) -> list[str]:
    """Its lines with their line ends, split where Python's tokenizer ends a line."""
    return _LINE.findall(source)


def _common_prefix(a: list[str], b: list[str]) -> int:
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def _of_tree(tree: ast.Module, source: str, offset: int) -> Outline:
    """The outline of a parsed `source` whose first line is line `offset + 1` of the file."""
    spans: list[tuple[int, int]] = []
    owners: dict[int, str] = {}
    for stmt in tree.body:
        first = _first_line(stmt) + offset
        assert stmt.end_lineno is not None
        spans.append((first, stmt.end_lineno + offset))
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            _claim(owners, stmt, stmt.name, offset)
            if isinstance(stmt, ast.ClassDef):
                for member in stmt.body:
                    if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                        _claim(owners, member, f"{stmt.name}.{member.name}", offset)
    starts = [0, *(match.end() for match in NEWLINE.finditer(source))]
    constants = tuple(
        (bisect_right(starts, constant.start) + offset, constant.name, constant.value)
        for constant in constants_in(tree, source)
    )
    return Outline(tuple(spans), owners, constants)


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno] + [decorator.lineno for decorator in getattr(node, "decorator_list", [])])


def _claim(owners: dict[int, str], node: ast.stmt, name: str, offset: int) -> None:
    """Its lines, decorators included, belong to `name`."""
    assert node.end_lineno is not None
    for line in range(_first_line(node) + offset, node.end_lineno + offset + 1):
        owners[line] = name
