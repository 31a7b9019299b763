"""Has this been tried? The rule that tells which earlier changes of train.py are the same, or
nearly the same, as a new one, and how. Pure: change summaries (server/trainpy/changes.py) in, verdicts
out; no database, no git. Finding the candidates and their outcomes is server/crud/similar.py,
by the keys `index_keys` gives (each a necessary condition of one kind of match).

A change has two parts: the constants it set (`NAME = <number>` at module level, compared by
value) and its code, the other lines it removed and added (whitespace collapsed). Two changes are
similar in one of these ways, tried in this order:

- `same_change`: the same lines removed and the same lines added, on the same base. (Byte-equal
  results are `identical`, found by content hash before this rule runs; what is left here
  differs only in whitespace or blank lines.)
- `same_change_other_base`: the same lines removed and added, on another base.
- `nearby_constants`: the same constants set (the same names; none that the other did not set),
  each to a nearby value (`value_distance` at most NEARBY), and the same code lines.
- `same_direction`: the same constants set and the same code lines, each constant moved the same
  way (up or down from its value before) but not all to nearby values: this one pushes them
  further, or not as far (`detail` says which). What an earlier try in that direction did is
  evidence for this one.
- `contained`: every change the earlier one made is part of the new one, which makes more: each
  constant it set is set to the same value, and each of its changed code lines (as multisets) is
  among the new one's. The new change combines it with others (e.g. two near misses).
- `overlapping_code`: both changed code (not only constants) and most of it is the same: the
  Jaccard index of their changed code lines (removed lines marked `-`, added ones `+`, counted as
  multisets) is at least MIN_OVERLAP. Their constants may differ.

Changes of different constants, or of the same constant to far values, are not similar. The
distance of a match (0 for the same change) is the largest value distance of its constants for
`nearby_constants` and `same_direction`, 1 - its share of the new change's constants and code
lines for `contained`,
and 1 - Jaccard for `overlapping_code`. `rank` orders matches by kind (in
the order above), then distance, then newest first.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from protocol.states import SimilarityKind
from server.trainpy.changes import ChangeSummary, ConstantChange

# Two values of a constant are nearby when they are within a quarter of a doubling of each other
# (a factor 2**0.25 = 1.19, or the same distance in logit space for fractions): half a step of a
# sweep on a sqrt(2) grid, the finest grid hyperparameter sweeps commonly use, so two nearby
# values would fall on the same point of any usual sweep. The random agent moves a value by a
# factor drawn from [1/2, 2]; each nearby value measured covers a quarter of that range around it.
NEARBY = math.log(2.0) / 4
MIN_OVERLAP = 0.5  # most of the code lines (Jaccard) in common


_ORDER = {kind: position for position, kind in enumerate(SimilarityKind)}


@dataclass(frozen=True)
class Change:
    """A change as the rule sees it: what it did to which base."""

    summary: ChangeSummary
    base: str


@dataclass(frozen=True)
class Similarity:
    kind: SimilarityKind
    distance: float  # 0: the same; grows to the kind's threshold
    detail: str  # in words, e.g. "MATRIX_LR 0.041 (here 0.04)"


@dataclass(frozen=True)
class Match:
    experiment_id: int
    similarity: Similarity


def value_distance(a: float | None, b: float | None) -> float:
    """How far apart two values of a constant are, in the space the random agent moves them in:
    logit space when both lie strictly between 0 and 1 (learning rates, betas, fractions), log
    space when both have the same sign otherwise; infinite across zero, and for a constant that
    one side removed (None)."""
    if a == b:
        return 0.0
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    if 0 < a < 1 and 0 < b < 1:
        return abs(_logit(a) - _logit(b))
    if (a > 0 and b > 0) or (a < 0 and b < 0):
        return abs(math.log(abs(a)) - math.log(abs(b)))
    return math.inf


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def nearby_range(value: float) -> tuple[float, float]:
    """An interval that holds every value nearby `value` (value_distance at most NEARBY), for the
    database to narrow the candidates before the rule runs (a little wider than needed: both
    spaces a fraction can be compared in, and a margin for rounding)."""
    if value == 0 or not math.isfinite(value):
        return value, value
    factor = math.exp(NEARBY) * (1 + 1e-9)
    low, high = sorted((value / factor, value * factor))
    if 0 < value < 1:
        logit = _logit(value)
        low, high = (
            min(low, _sigmoid(logit - NEARBY * (1 + 1e-9))),
            max(high, _sigmoid(logit + NEARBY * (1 + 1e-9))),
        )
    return low, high


@dataclass(frozen=True)
class IndexKeys:
    """What a change is stored and looked up by (server/crud/similar.py): each key is a necessary
    condition of one kind of match, so that index lookups narrow the candidates the rule runs on."""

    lines: str  # same_change, same_change_other_base: the same removed and added lines
    # nearby_constants, same_direction: the same constants set and code lines (None: sets none)
    shape: str | None
    code_lines: int  # how many of its changed lines are code (ChangeSummary.code)
    line_keys: frozenset[str]  # contained, overlapping_code: at least one code line in common


def index_keys(summary: ChangeSummary) -> IndexKeys:
    code = Counter(summary.code) if summary.parsed else Counter[str]()
    shape = (
        _digest([sorted(c.name for c in summary.constants), sorted(code.elements())])
        if summary.parsed and summary.constants
        else None
    )
    return IndexKeys(
        lines=_digest([summary.removed, summary.added]),
        shape=shape,
        code_lines=sum(code.values()),
        line_keys=frozenset(hashlib.sha256(line.encode()).hexdigest() for line in code),
    )


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def compare(new: Change, old: Change) -> Similarity | None:
    """How `old` resembles `new`, or None when it does not."""
    a, b = new.summary, old.summary
    if a.empty or b.empty:
        return None
    if a.removed == b.removed and a.added == b.added:
        if new.base == old.base:
            return Similarity(SimilarityKind.SAME_CHANGE, 0.0, "the same lines changed the same way")
        return Similarity(
            SimilarityKind.SAME_CHANGE_OTHER_BASE, 0.0, f"the same lines changed on base {old.base[:10]}"
        )
    if not (a.parsed and b.parsed):  # constants and code lines are unknown
        return None
    code_a, code_b = Counter(a.code), Counter(b.code)
    if a.constants and code_a == code_b:
        nearby = _nearby_constants(a.constants, b.constants)
        if nearby is not None:
            return nearby
        same_way = _same_direction(a.constants, b.constants)
        if same_way is not None:
            return same_way
    contained = _contained(a, b, code_a, code_b)
    if contained is not None:
        return contained
    if code_a and code_b:
        shared = sum((code_a & code_b).values())
        jaccard = shared / sum((code_a | code_b).values())
        if jaccard >= MIN_OVERLAP:
            return Similarity(
                SimilarityKind.OVERLAPPING_CODE,
                1.0 - jaccard,
                f"{shared} of its {sum(code_b.values())} changed code lines are the same",
            )
    return None


def _contained(
    new: ChangeSummary, old: ChangeSummary, code_new: Counter[str], code_old: Counter[str]
) -> Similarity | None:
    """`contained` when `old`'s whole change is part of `new`'s, which makes more."""
    values = {change.name: change.new for change in new.constants}
    if any(change.name not in values or values[change.name] != change.new for change in old.constants):
        return None
    if code_old - code_new:  # a line of its code that this change does not make
        return None
    size_old = len(old.constants) + sum(code_old.values())
    size_new = len(new.constants) + sum(code_new.values())
    if size_old == 0 or size_old >= size_new:
        return None
    constants = ", ".join(f"{change.name} {_shown(change.new)}" for change in old.constants)
    lines = sum(code_old.values())
    parts = [constants] if constants else []
    parts += [f"{lines} code line{'s' if lines != 1 else ''}"] if lines else []
    return Similarity(
        SimilarityKind.CONTAINED,
        1.0 - size_old / size_new,
        f"all of its change is part of this one: {'; '.join(parts)}",
    )


def _nearby_constants(new: tuple[ConstantChange, ...], old: tuple[ConstantChange, ...]) -> Similarity | None:
    theirs = {change.name: change.new for change in old}
    if set(theirs) != {change.name for change in new}:
        return None
    distances = [value_distance(change.new, theirs[change.name]) for change in new]
    if max(distances) > NEARBY:
        return None
    detail = ", ".join(
        f"{change.name} {_shown(theirs[change.name])} (here {_shown(change.new)})" for change in new
    )
    return Similarity(SimilarityKind.NEARBY_CONSTANTS, max(distances), detail)


def _way(change: ConstantChange) -> int:
    """+1 up, -1 down, 0 for a constant added or removed."""
    if change.old is None or change.new is None:
        return 0
    return (change.new > change.old) - (change.new < change.old)


def _same_direction(new: tuple[ConstantChange, ...], old: tuple[ConstantChange, ...]) -> Similarity | None:
    """`same_direction` when `old` moved the same constants as `new`, each up or each down alike."""
    theirs = {change.name: change for change in old}
    if set(theirs) != {change.name for change in new}:
        return None
    pairs = [(change, theirs[change.name]) for change in new]
    if any(_way(here) == 0 or _way(here) != _way(there) for here, there in pairs):
        return None
    distances = [value_distance(here.new, there.new) for here, there in pairs]
    if not all(math.isfinite(distance) for distance in distances):
        return None
    further = all((here.new - there.new) * _way(here) > 0 for here, there in pairs)  # type: ignore[operator]
    words = "pushed further" if further else "moved the same way"
    moves = ", ".join(
        f"{here.name} {_shown(there.old)} -> {_shown(there.new)} "
        f"(here {_shown(here.old)} -> {_shown(here.new)})"
        for here, there in pairs
    )
    return Similarity(SimilarityKind.SAME_DIRECTION, max(distances), f"{words}: {moves}")


def _shown(value: float | None) -> str:
    return "removed" if value is None else f"{value:g}"


def rank(new: Change, earlier: Iterable[tuple[int, Change]]) -> list[Match]:
    """The earlier changes (experiment id, change) similar to `new`, most alike first."""
    matches = [
        Match(experiment_id, similarity)
        for experiment_id, change in earlier
        if (similarity := compare(new, change)) is not None
    ]
    return sorted(matches, key=sort_key)


def sort_key(match: Match) -> tuple[int, float, int]:
    """Kind (most alike first), then distance, then newest first."""
    return (_ORDER[match.similarity.kind], match.similarity.distance, -match.experiment_id)
