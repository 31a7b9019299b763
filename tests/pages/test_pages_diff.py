"""The highlighted diff shows exactly the API's diff text, line for line, whatever train.py holds."""

from __future__ import annotations

import html
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from server.pages.diff_view import highlight_lines, render_diff
from server.trainpy.patches import make_patch, split_lines

_TAG = re.compile(r"<[^>]+>")

# Lines that stress a Python lexer: strings across lines, comments, markup-like text, tabs,
# blank lines, non-ASCII, a form feed, and lone carriage returns.
python_lines = st.sampled_from(
    [
        "import torch",
        "x = 1  # comment with <b>tag</b> & ampersand",
        's = """start of a doc',
        'end of a doc"""',
        "'''",
        "def f(a, b):",
        "\treturn a + b",
        "",
        "    ",
        "y = 'π ≈ 3.14159'",
        "z = '\\x00'",
        "\f",
        "half\rline",
        "<script>alert(1)</script>",
        "@decorator",
        "class Model(nn.Module):",
        "--x",
        "++y",
    ]
)
sources = st.lists(python_lines, max_size=25).map("\n".join) | st.lists(python_lines, max_size=25).map(
    lambda lines: "\n".join(lines) + "\n"
)


def text_of(fragment: str) -> str:
    return html.unescape(_TAG.sub("", fragment))


@settings(max_examples=150)
@given(sources, sources)
def test_rendered_lines_are_the_patch_lines(old: str, new: str) -> None:
    rendered = render_diff(old, new)
    patch_lines = make_patch(old, new).split("\n")[2:]  # without the ---/+++ header
    patch_lines = [line for line in patch_lines if line]
    assert len(rendered.lines) == len(patch_lines)
    for line, raw in zip(rendered.lines, patch_lines, strict=True):
        if line.kind in ("hunk", "note"):
            assert text_of(line.html) == raw
        else:
            assert {"+": "add", "-": "del", " ": "ctx"}[raw[0]] == line.kind
            assert text_of(line.html) == raw[1:]
    assert rendered.added == sum(line.startswith("+") for line in patch_lines)
    assert rendered.removed == sum(line.startswith("-") for line in patch_lines)


@given(sources)
def test_highlighting_keeps_one_balanced_fragment_per_line(source: str) -> None:
    lines = highlight_lines(source)
    assert [text_of(line) for line in lines] == [line.rstrip("\n") for line in split_lines(source)]
    for line in lines:
        assert line.count("<span") == line.count("</span>")
        assert "<script" not in line


def test_a_line_inside_a_multiline_string_is_coloured_as_a_string() -> None:
    old = 'DOC = """\nfirst\nsecond\n"""\nLR = 0.1\n'
    new = 'DOC = """\nfirst\nsecond changed\n"""\nLR = 0.2\n'
    lines = {text_of(line.html): line for line in render_diff(old, new).lines}
    # Alone, "second changed" would lex as two names; in the file it is inside a string.
    assert 'class="s2"' in lines["second changed"].html
    assert 'class="mf"' in lines["LR = 0.2"].html
    assert lines["LR = 0.2"].kind == "add" and lines["LR = 0.1"].kind == "del"
    assert (lines["LR = 0.1"].old_no, lines["LR = 0.2"].new_no) == (5, 5)


def test_the_baseline_is_shown_as_a_whole_file_added() -> None:
    source = "A = 1\nB = 2\n"
    rendered = render_diff("", source)
    assert [line.kind for line in rendered.lines] == ["hunk", "add", "add"]
    assert [line.new_no for line in rendered.lines[1:]] == [1, 2]
