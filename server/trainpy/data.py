"""How much of a train.py is data rather than code: its literals and comments, in blocks, and the
information it holds however it is spelled.

A train.py is code. Under a size limit alone a candidate can carry what it computed offline (a
bigram table in a list literal or a base64 string) and score with it instead of training
(issue 32). Code needs few literals, so the literals and comments together are bounded
(TRAIN_PY_MAX_DATA_BYTES) well below the size limit, and a refusal names the largest block.

Data need not be a literal: identifiers, or the order of statements, spell it as well (a function
never called whose body names `v0_9f3a...`, read back from its code object). No reading of tokens
can tell such code from real code, so the file's information is bounded too, measured as its size
under deflate (TRAIN_PY_MAX_INFORMATION_BYTES): no spelling carries more than that, and code
compresses about threefold, so honest code under the size limit stays below it. A refusal names
the top-level statement that holds the most.

A block is a run of literal and comment tokens joined only by brackets, separators, signs and
line breaks: a list of numbers, a dict of strings, a docstring or a paragraph of comments is one
block, measured as the source it spans (commas and brackets included). A name or a keyword ends a
block. A file Python cannot tokenize has no blocks here: it cannot run either, and its run says
where its syntax breaks.
"""

from __future__ import annotations

import ast
import io
import token
import tokenize
import zlib
from dataclasses import dataclass

from server.trainpy.outline import split_lines

# What a literal or comment is made of, and what may join two of them inside one block.
# f-strings are tokens of their own from Python 3.12 on.
_DATA = {token.STRING, token.NUMBER, token.COMMENT} | {
    getattr(token, name) for name in ("FSTRING_MIDDLE",) if hasattr(token, name)
}
_JOINS = {token.NL, token.NEWLINE, token.INDENT, token.DEDENT} | {
    getattr(token, name) for name in ("FSTRING_START", "FSTRING_END") if hasattr(token, name)
}
_JOINING_OPS = {",", "(", ")", "[", "]", "{", "}", ":", "-", "+", ";"}


@dataclass(frozen=True)
class DataBlock:
    line: int  # where it starts, 1-based
    end_line: int
    size: int  # bytes of source from its first literal or comment to the end of its last


def data_blocks(source: str) -> list[DataBlock]:
    """The literal-and-comment blocks of `source`, in order."""
    lines = io.StringIO(source).readlines()  # split as tokenize reads them
    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line.encode()))

    def offset(row: int, col: int) -> int:  # tokenize counts characters; blocks are in bytes
        if row > len(lines):
            return line_starts[-1]
        return line_starts[row - 1] + len(lines[row - 1][:col].encode())

    blocks: list[DataBlock] = []
    first: tuple[int, int] | None = None  # (line, byte offset) where the open block starts
    last: tuple[int, int] = (0, 0)  # (line, byte offset) where its last data token ends

    def close() -> None:
        nonlocal first
        if first is not None:
            blocks.append(DataBlock(first[0], last[0], last[1] - first[1]))
            first = None

    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in _DATA:
                if first is None:
                    first = (tok.start[0], offset(*tok.start))
                last = (tok.end[0], offset(*tok.end))
            elif tok.type in _JOINS or (tok.type == token.OP and tok.string in _JOINING_OPS):
                continue
            else:
                close()
    except (tokenize.TokenError, SyntaxError):
        return []
    close()
    return blocks


@dataclass(frozen=True)
class DataShare:
    total: int  # bytes of all blocks
    largest: DataBlock | None


def measure(source: str) -> DataShare:
    blocks = data_blocks(source)
    return DataShare(sum(b.size for b in blocks), max(blocks, key=lambda b: b.size, default=None))


def information(source: str) -> int:
    """Bytes of information in `source`, whatever spells it: its size under deflate at level 9."""
    return len(zlib.compress(source.encode(), 9))


def densest_statement(source: str) -> DataBlock:
    """The top-level statement (a function, a class, an assignment...; with its decorators) that
    holds the most information on its own, with that as its size; the whole file if it does not
    parse. Each statement is measured alone, so finding it costs one pass over the file however
    many statements it has (measuring what removing each would save costs one pass per statement:
    a minute for a file of thousands of one-line statements)."""
    lines = split_lines(source)  # as ast numbers them
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return DataBlock(1, len(lines), information(source))
    best = DataBlock(1, len(lines), -1)
    for stmt in body:
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
        last = stmt.end_lineno or stmt.lineno
        held = information("".join(lines[first - 1 : last]))
        if held > best.size:
            best = DataBlock(first, last, held)
    return best
