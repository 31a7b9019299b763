"""Search/replace edits of train.py: the change as `[{old, new}]`, which language models write far
more reliably than unified diffs (no line numbers, no context counts).

Each edit replaces `old` by `new` in the text as the edits before it left it; `old` must occur
there exactly once, so that the edit means one place. An `old` that does not occur, or occurs more
than once, is an EditError naming the edit and the text, so that the sender can fix that one.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.schemas import Edit

SHOWN_CHARS = 120  # of an `old` quoted in an error


class EditError(ValueError):
    """An edit that does not name one place of train.py (client error); `kind` is the problem's."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """`source` with every edit applied in order (EditError for the first that names no one place)."""
    text = source
    for number, edit in enumerate(edits, 1):
        found = text.count(edit.old)
        if found != 1:
            quoted = edit.old if len(edit.old) <= SHOWN_CHARS else edit.old[:SHOWN_CHARS] + "..."
            if found == 0:
                raise EditError(
                    "edit-not-found",
                    f"edit {number}: `old` does not occur in train.py (as the edits before it left it): "
                    f"{quoted!r}; copy it exactly from the base, whitespace included",
                )
            raise EditError(
                "edit-ambiguous",
                f"edit {number}: `old` occurs {found} times in train.py: {quoted!r}; "
                "include the lines around it so that it names one place",
            )
        text = text.replace(edit.old, edit.new, 1)
    return text
