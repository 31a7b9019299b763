"""What a change to train.py touches, from the source it was made on and the source it made: the
constants it set, the regions it changed and the lines it removed and added. Pure: no database,
no git.

"Has this been tried?" (similar experiments) and the keep rates by kind of change are built on
this summary, so that both speak of a change in the same terms:
- a constant is what protocol/constants.py finds (a module-level `NAME = <number>`); it changed
  when its value did (`2**19` and `524288` are the same value), or when it appeared or went;
- a region is the top-level function or class a changed line sits in (`train`, `GPT.forward` for
  a method), or `module` for module-level code (constants included: those are counted by name);
- lines are compared with their whitespace collapsed, so that re-indenting is not a change of
  what they say, and blank lines are left out.

A source that does not parse still has lines; its constants and regions are unknown (`parsed`
is False), and nothing is guessed for them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from protocol.constants import assignment_pattern
from server.trainpy.outline import LineEdit, outlines

MODULE = "module"  # the region of module-level code


@dataclass(frozen=True)
class ConstantChange:
    name: str
    old: int | float | None  # None: the constant is new
    new: int | float | None  # None: the constant went


@dataclass(frozen=True)
class ChangeSummary:
    constants: tuple[ConstantChange, ...]  # in the order of the new source, then the ones that went
    regions: tuple[str, ...]  # sorted
    removed: tuple[str, ...]  # changed lines of the base, whitespace collapsed, in order
    added: tuple[str, ...]  # changed lines of the new source, whitespace collapsed, in order
    # The changed lines that set none of its constants: `-line` removed, `+line` added, in order.
    code: tuple[str, ...]
    parsed: bool  # both sources parse: constants and regions are known

    @property
    def empty(self) -> bool:
        return not (self.constants or self.removed or self.added)


def summarize(base: str, new: str) -> ChangeSummary:
    """The change that turns `base` into `new`."""
    # Lines the two share at either end are no change: only the lines between are compared.
    edit = LineEdit.of(base, new)
    base_lines = _lines(edit.base, edit.head, len(edit.base) - edit.tail)
    new_lines = _lines(edit.new, edit.head, len(edit.new) - edit.tail)
    base_of, new_of = outlines(edit)
    parsed = base_of is not None and new_of is not None
    base_regions = base_of.owners if base_of is not None else None
    new_regions = new_of.owners if new_of is not None else None
    removed: list[str] = []
    added: list[str] = []
    regions: set[str] = set()
    matcher = difflib.SequenceMatcher(
        None, [t for _, t in base_lines], [t for _, t in new_lines], autojunk=False
    )
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for lines, owners, out in (
            (base_lines[i1:i2], base_regions, removed),
            (new_lines[j1:j2], new_regions, added),
        ):
            for number, text in lines:
                out.append(text)
                if owners is not None:
                    regions.add(owners.get(number, MODULE))
    # A constant assigned twice holds its last value, as when the module runs.
    before = {name: value for _line, name, value in base_of.constants} if base_of is not None else {}
    after = {name: value for _line, name, value in new_of.constants} if new_of is not None else {}
    constants = [
        ConstantChange(name, before.get(name), value)
        for name, value in after.items()
        if name not in before or before[name] != value
    ]
    constants += [ConstantChange(name, value, None) for name, value in before.items() if name not in after]
    known = tuple(constants) if parsed else ()  # none unless both sources parse
    return ChangeSummary(
        constants=known,
        regions=tuple(sorted(regions)) if parsed else (),
        removed=tuple(removed),
        added=tuple(added),
        code=code_of(known, removed, added),
        parsed=parsed,
    )


def code_of(
    constants: Iterable[ConstantChange], removed: Iterable[str], added: Iterable[str]
) -> tuple[str, ...]:
    """The changed lines that set none of `constants` (by how a constant's assignment is spelled),
    signed: `-line` removed, `+line` added."""
    assignment = assignment_pattern(c.name for c in constants)
    return tuple(
        sign + line
        for sign, side in (("-", removed), ("+", added))
        for line in side
        if assignment is None or not assignment.search(line)
    )


def _lines(lines: list[str], start: int, end: int) -> list[tuple[int, str]]:
    """Lines `start` to `end` (0-based, exclusive) that are not blank, whitespace collapsed, with
    their numbers (1-based; lines as Python's tokenizer ends them, so that they agree with ast's)."""
    collapsed = ((number, " ".join(line.split())) for number, line in enumerate(lines[start:end], start + 1))
    return [(number, text) for number, text in collapsed if text]
