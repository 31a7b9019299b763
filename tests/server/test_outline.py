"""The outline of a changed source, parsing only what changed (server/trainpy/outline.py), is the outline of
the whole source parsed: on the real baseline, for random edits of its lines (made of its own
lines and of lines that continue, open or close statements)."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from server.trainpy.outline import LineEdit, outline, outlines

BASELINE = (Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py").read_text()
LINES = BASELINE.splitlines(keepends=True)
TRICKY = [
    "else:\n",
    "    pass\n",
    "@decorator\n",
    "def added(x):\n",
    "class Added:\n",
    "LR = 2**-7\n",
    "NEW_CONSTANT: float = 3 * 0.5\n",
    '"""\n',
    "x = (1,\n",
    ")\n",
    "\n",
    "# a comment\n",
    "from __future__ import annotations\n",
    "        return self.forward(x)\n",
    "WINDOWS_LINE = 1\r\n",
]

edits = st.lists(
    st.tuples(
        st.integers(0, len(LINES)),  # where
        st.integers(0, 4),  # lines removed there
        st.lists(st.one_of(st.sampled_from(LINES), st.sampled_from(TRICKY)), max_size=4),  # lines put in
    ),
    min_size=1,
    max_size=3,
)


def edited(changes: list[tuple[int, int, list[str]]]) -> str:
    lines = list(LINES)
    for where, removed, added in changes:
        lines[where : where + removed] = added
    return "".join(lines)


@settings(max_examples=300, deadline=None)
@given(edits)
def test_parsing_only_what_changed_gives_the_outline_of_the_whole(
    changes: list[tuple[int, int, list[str]]],
) -> None:
    new = edited(changes)
    assert outlines(LineEdit.of(BASELINE, new)) == (outline(BASELINE), outline(new))


def test_a_constant_set_in_a_function_is_no_change_of_the_module_s_constants() -> None:
    base = "LR = 0.1\n\ndef train():\n    return LR\n"
    new = base.replace("    return LR\n", "    LR = 0.2\n    return LR\n")
    _, after = outlines(LineEdit.of(base, new))
    assert after is not None and [(name, value) for _, name, value in after.constants] == [("LR", 0.1)]
    assert after.owners[4] == after.owners[5] == "train"


class _Finalized:
    """Garbage in a reference cycle whose finalizer is Python code, run by a garbage collection."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        pass


def test_threads_parse_at_the_same_time() -> None:
    """Submissions and rebases summarise changes in several threads at once. CPython 3.11's ast
    module fails ("SystemError: AST constructor recursion depth mismatch") when a collection in
    one thread's parse runs Python code while another thread parses; without the lock in
    server/trainpy/outline.py this test failed in 3 runs of 3."""
    failures: list[BaseException] = []

    def parse_repeatedly() -> None:
        for _ in range(50):
            _Finalized()
            try:
                outline(BASELINE)
            except SystemError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=parse_repeatedly) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
