"""Keep rates by kind of change: what was tried, measured and kept, per constant (and the way it
moved) and per region of train.py, as a pure aggregation of decided experiments. No database, no
git: `server/crud/change_kinds.py` stores each experiment's kinds (from server/trainpy/changes.py) when
it is decided, and reads them back for this.

A kind of change is
- a constant and the way its value moved: `MATRIX_LR up`, `MATRIX_LR down`, `WARMUP added`,
  `WARMUP removed` (raising and lowering a learning rate are different ideas);
- a region: the top-level function, class or method a changed line sits in (`train`,
  `GPT.forward`), or `module` for module-level code (constants included).

A change counts once under each of its kinds: one that raised MATRIX_LR and lowered WARMUP is one
experiment tried for `MATRIX_LR up` and one for `WARMUP down`, and its keep counts for both.
`alone` counts the experiments in which the kind was the change's only one of its part (the only
constant it set, or the only region it touched): their outcome is that kind's alone. So, per
kind, alone <= tried and kept <= measured <= tried; the kinds' `tried` add up to the number of
kinds of all experiments, not to the number of experiments, which `overall` counts. A change whose
sources do not parse has no kinds: it is counted in `overall` (and its `unparsed`) only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.states import Direction, Part
from server.trainpy.changes import ChangeSummary


@dataclass(frozen=True, order=True)
class Kind:
    part: Part
    name: str
    direction: Direction | None  # constants only


@dataclass(frozen=True)
class Outcome:
    """A decided experiment as keep rates see it."""

    experiment_id: int
    kept: bool
    measured: bool  # it has a valid run (a crash is tried, not measured)
    effect: float | None  # its latest judgement's effect against its reference (negative is better)
    se: float | None
    kinds: tuple[Kind, ...]
    parsed: bool = True  # both sources parsed: its kinds are known


@dataclass(frozen=True)
class BestEffect:
    experiment_id: int
    effect: float
    se: float | None


@dataclass
class Tally:
    tried: int = 0
    measured: int = 0
    kept: int = 0
    best: BestEffect | None = None

    @property
    def rate(self) -> float | None:
        """kept / tried (a crash is a try that failed), None before any try."""
        return self.kept / self.tried if self.tried else None

    def add(self, outcome: Outcome) -> None:
        self.tried += 1
        self.measured += outcome.measured
        self.kept += outcome.kept
        better = self.best is None or (outcome.effect is not None and outcome.effect < self.best.effect)
        if outcome.measured and outcome.effect is not None and better:
            self.best = BestEffect(outcome.experiment_id, outcome.effect, outcome.se)


@dataclass
class KindTally:
    kind: Kind
    tally: Tally = field(default_factory=Tally)
    alone: int = 0  # tries in which it was the change's only kind of its part


@dataclass
class KeepRates:
    overall: Tally
    unparsed: int  # experiments counted in `overall` only: their sources did not parse
    kinds: list[KindTally]  # most tried first, then by part, name and direction


def kinds_of(summary: ChangeSummary) -> tuple[Kind, ...]:
    """The kinds of a change: its constants with their direction, then its regions."""
    constants = tuple(
        Kind(Part.CONSTANT, change.name, _direction(change.old, change.new)) for change in summary.constants
    )
    return constants + tuple(Kind(Part.REGION, region, None) for region in summary.regions)


def _direction(old: float | None, new: float | None) -> Direction:
    if old is None:
        return Direction.ADDED
    if new is None:
        return Direction.REMOVED
    return Direction.UP if new > old else Direction.DOWN


def keep_rates(outcomes: Iterable[Outcome]) -> KeepRates:
    overall, unparsed = Tally(), 0
    tallies: dict[Kind, KindTally] = {}
    for outcome in outcomes:
        overall.add(outcome)
        unparsed += not outcome.parsed
        kinds = set(outcome.kinds)
        per_part: dict[Part, int] = {}
        for kind in kinds:
            per_part[kind.part] = per_part.get(kind.part, 0) + 1
        for kind in kinds:
            entry = tallies.setdefault(kind, KindTally(kind))
            entry.tally.add(outcome)
            entry.alone += per_part[kind.part] == 1
    ranked = sorted(
        tallies.values(), key=lambda t: (-t.tally.tried, t.kind.part, t.kind.name, t.kind.direction or "")
    )
    return KeepRates(overall=overall, unparsed=unparsed, kinds=ranked)
