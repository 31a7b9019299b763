"""The diff of an experiment as HTML rows: diff colours plus Python syntax highlighting.

Both versions of train.py are highlighted whole (so that a line inside a multi-line string is
coloured as string, which highlighting diff lines one by one would get wrong), and each diff line
takes its highlighted twin by line number: removed lines from the old file, the rest from the new.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from server.trainpy.patches import make_patch, split_lines

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
# stripnl=False keeps leading blank lines, so that output line i is input line i.
_LEXER = PythonLexer(stripnl=False, ensurenl=True)
_FORMATTER = HtmlFormatter(nowrap=True)

LineKind = Literal["hunk", "add", "del", "ctx", "note"]


@dataclass(frozen=True)
class DiffLine:
    kind: LineKind
    old_no: int | None
    new_no: int | None
    html: Markup


@dataclass(frozen=True)
class RenderedDiff:
    lines: list[DiffLine]
    added: int
    removed: int


def highlight_lines(source: str) -> list[Markup]:
    """One HTML fragment per line of `source` (lines end at '\\n' only, as in git), tags balanced.

    Pygments closes its spans at every line end. It also reads a lone '\\r' as a line end, which
    would shift every later line: such a file is shown plain instead.
    """
    plain = split_lines(source)
    lines = highlight(source, _LEXER, _FORMATTER).split("\n") if source else [""]
    if lines[-1] != "" or len(lines) - 1 != len(plain):
        return [escape(line.rstrip("\n")) for line in plain]
    return [Markup(line) for line in lines[:-1]]


@lru_cache(maxsize=64)
def render_diff(old: str, new: str) -> RenderedDiff:
    """The unified diff (as the API's /diff serves it) from `old` to `new`, ready for a template.

    Cached: an experiment's two versions never change, and a page may be reloaded often while a
    run is watched.
    """
    old_html, new_html = highlight_lines(old), highlight_lines(new)
    out: list[DiffLine] = []
    old_no = new_no = 0
    added = removed = 0
    # The first two lines are the ---/+++ file header; a removed "-- x" also starts with "---".
    for raw in make_patch(old, new).split("\n")[2:]:
        header = _HUNK.match(raw)
        if header:
            old_no, new_no = int(header.group(1)), int(header.group(2))
            out.append(DiffLine("hunk", None, None, escape(raw)))
        elif raw.startswith("+"):
            out.append(DiffLine("add", None, new_no, _pick(new_html, new_no, raw)))
            new_no += 1
            added += 1
        elif raw.startswith("-"):
            out.append(DiffLine("del", old_no, None, _pick(old_html, old_no, raw)))
            old_no += 1
            removed += 1
        elif raw.startswith("\\"):
            out.append(DiffLine("note", None, None, escape(raw)))
        elif raw:
            out.append(DiffLine("ctx", old_no, new_no, _pick(new_html, new_no, raw)))
            old_no += 1
            new_no += 1
    return RenderedDiff(out, added, removed)


def _pick(highlighted: list[Markup], line_no: int, raw: str) -> Markup:
    """The highlighted line `line_no` (1-based); the plain text should the numbers ever disagree."""
    if 1 <= line_no <= len(highlighted):
        return highlighted[line_no - 1]
    return escape(raw[1:])
