"""server/train_py_data.py: literals and comments measured in blocks, and the bound on them."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from server.core.config import ServerSettings
from server.train_py_data import DataBlock, data_blocks, measure

BASELINE = (Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py").read_text()
LIMIT = ServerSettings.model_fields["train_py_max_data_bytes"].default


@given(st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=300), st.integers(0, 3))
def test_a_list_of_numbers_is_one_block_of_the_source_it_spans(numbers: list[int], line_every: int) -> None:
    items = [str(n) for n in numbers]
    if line_every:  # the same literal broken over lines, as a formatter would
        items = [f"{item}\n   " if i % line_every == 0 else item for i, item in enumerate(items)]
    literal = ", ".join(items)
    source = f"import torch\n\nTABLE = [{literal}]\nx = torch.tensor(TABLE)\n"
    first = min(i for i, c in enumerate(literal) if c.isdigit())  # a leading sign is not data
    last = max(i for i, c in enumerate(literal) if c.isdigit())
    assert data_blocks(source) == [DataBlock(3, 3 + literal[:last].count("\n"), last + 1 - first)]


def test_names_end_blocks_and_comments_strings_and_numbers_are_counted() -> None:
    source = (
        '"""Doc."""\n'  # 10 bytes
        "# a comment\n"  # 11 bytes, joined to the docstring by the line break
        "x = 1  # one\n"  # `x` ends the block; then `1  # one`: 8 bytes
        "y = {'a': 2.5}\n"  # 'a': 2.5 -> 8 bytes
        "z = f(3) + b'\\x00'\n"  # `f` ends; 3 alone; `) +` join 3 and the bytes literal: 3) + b'\x00'
    )
    blocks = data_blocks(source)
    assert [(b.line, b.end_line) for b in blocks] == [(1, 2), (3, 3), (4, 4), (5, 5)]
    assert [b.size for b in blocks] == [22, 8, 8, len("3) + b'\\x00'")]
    assert measure(source).total == sum(b.size for b in blocks)


def test_characters_outside_ascii_are_measured_in_bytes() -> None:
    assert data_blocks("s = 'é€'\n") == [DataBlock(1, 1, len("'é€'".encode()))]


def test_a_file_python_cannot_tokenize_has_no_blocks() -> None:
    assert data_blocks("x = '''never closed\n") == []
    assert measure("def f(:\n  pass\n").total >= 0  # any answer without raising


def test_the_baseline_and_realistic_edits_stay_well_under_the_bound() -> None:
    # An agent that documents its change at length: every comment of the baseline said twice,
    # plus a new helper with a docstring and a small table of constants.
    chatty = re.sub(r"(?m)^(\s*)(#.*)$", r"\1\2\n\1\2", BASELINE)
    helper = (
        '\n\ndef warmup_schedule(step: int) -> float:\n    """A linear warmup over the first steps, then'
        ' flat: what the last three experiments suggested, see their notes."""\n'
        "    table = [0.1, 0.25, 0.5, 0.75, 1.0]\n    return table[min(step, len(table) - 1)]\n"
    )
    for source in (BASELINE, chatty + helper):
        assert measure(source).total < LIMIT * 0.75, measure(source)


def test_carried_tables_pass_the_bound_whatever_their_encoding() -> None:
    rng = [(i * 7919 + 13) % 4096 for i in range(8192)]  # stands for a table computed offline
    packed = b"".join(n.to_bytes(2, "little") for n in rng)
    carriers = {
        "list": f"T = {rng}\n",
        "base64": f"T = {base64.b64encode(packed).decode()!r}\n",
        "docstring": f'"""{base64.b85encode(packed).decode()}"""\n',
        "comments": "".join(f"# {packed[i : i + 48].hex()}\n" for i in range(0, len(packed), 48)),
    }
    for name, carried in carriers.items():
        share = measure(BASELINE + "\n" + carried)
        assert share.total > LIMIT, name
        assert share.largest is not None and share.largest.end_line > BASELINE.count("\n") + 1, name
