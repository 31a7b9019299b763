"""Does a finding on one track hold on another? The transfer view, as a pure function.

A change is its removed and added lines (server/trainpy/changes.py's summary, `lines_sha`): the same
change made on two tracks, by a port (server/flows/ports.py) or by an agent on each, is one
change tried on both, whatever the bases it was made on. For each track it was tried on, its
outcome there is one experiment's: the latest decided one (kept, reverted or stale), else one
still pending, else the latest that ended without a decision (a rebased one went on as its copy,
which is the same change). Each outcome carries its effect ± se against what it was compared
with on that track: the effects are comparable as changes of val_bpb, never the values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.states import Decision, ExperimentStatus

DECIDED = (Decision.KEEP, Decision.REVERT, Decision.STALE)
PENDING = (ExperimentStatus.QUEUED, ExperimentStatus.RUNNING)


@dataclass(frozen=True)
class Tried:
    """One experiment of a change tried on more than one track."""

    experiment_id: int
    track_id: int
    change: str  # the change's lines_sha
    status: ExperimentStatus
    decision: Decision | None


@dataclass(frozen=True)
class Transfer:
    """A change and its outcome on each track: track id -> the experiment that stands for it."""

    first_experiment_id: int
    outcomes: dict[int, int]
    newest_experiment_id: int


def standing(tried: Tried) -> tuple[int, int]:
    """How well an experiment stands for its change on its track: decided first, then pending,
    then the rest; the newer first among equals."""
    rank = 2 if tried.decision in DECIDED else 1 if tried.status in PENDING else 0
    return rank, tried.experiment_id


def transfers(tried: Sequence[Tried]) -> list[Transfer]:
    """The changes tried on more than one track, newest first (by their newest experiment)."""
    by_change: defaultdict[str, list[Tried]] = defaultdict(list)
    for t in tried:
        by_change[t.change].append(t)
    found = []
    for group in by_change.values():
        best: dict[int, Tried] = {}
        for t in group:
            if t.track_id not in best or standing(t) > standing(best[t.track_id]):
                best[t.track_id] = t
        if len(best) > 1:
            found.append(
                Transfer(
                    first_experiment_id=min(t.experiment_id for t in group),
                    outcomes={track: t.experiment_id for track, t in sorted(best.items())},
                    newest_experiment_id=max(t.experiment_id for t in group),
                )
            )
    found.sort(key=lambda t: -t.newest_experiment_id)
    return found
