"""What a change to train.py touches, from the source it was made on and the source it made: the
constants it set, the regions it changed and the lines it removed and added. Pure: no database,
no git.

"Has this been tried?" (similar experiments) and the keep rates by kind of change are built on
this summary, so that both speak of a change in the same terms:
- a constant is what client/constants.py finds (a module-level `NAME = <number>`); it changed
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
from dataclasses import dataclass
from functools import lru_cache

from client.constants import NEWLINE
from server.outline import Outline, base_outline, outline_after

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
    parsed: bool  # both sources parse: constants and regions are known

    @property
    def empty(self) -> bool:
        return not (self.constants or self.removed or self.added)


def summarize(base: str, new: str) -> ChangeSummary:
    """The change that turns `base` into `new`."""
    base_lines, new_lines = _base_lines(base), _lines(new)
    base_of = base_outline(base)
    new_of = outline_after(base, base_of, new) if base_of is not None else None
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
    return ChangeSummary(
        constants=_constant_changes(base_of, new_of) if base_of is not None and new_of is not None else (),
        regions=tuple(sorted(regions)) if parsed else (),
        removed=tuple(removed),
        added=tuple(added),
        parsed=parsed,
    )


def _lines(source: str) -> list[tuple[int, str]]:
    """Its lines that are not blank, whitespace collapsed, with their numbers (1-based, counted
    where Python's tokenizer ends a line so that they agree with ast's)."""
    lines = ((number, " ".join(line.split())) for number, line in enumerate(NEWLINE.split(source), 1))
    return [(number, text) for number, text in lines if text]


_base_lines = lru_cache(maxsize=16)(_lines)  # a submission's base is nearly always the best


def _constant_changes(base_of: Outline, new_of: Outline) -> tuple[ConstantChange, ...]:
    before, after = base_of.constant_values(), new_of.constant_values()
    changes = [
        ConstantChange(name, before.get(name), value)
        for name, value in after.items()
        if name not in before or before[name] != value
    ]
    changes += [ConstantChange(name, value, None) for name, value in before.items() if name not in after]
    return tuple(changes)
