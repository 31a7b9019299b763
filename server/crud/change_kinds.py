"""What decided experiments changed (the change_kinds table): written shortly after each decision
by a background task (server/flows/summaries.py), and at start for experiments decided before
change_kinds existed; read for keep rates and near misses.

Each change was summarised once, when it was queued (its experiment_changes row,
server/crud/similar.py; experiments older than that table are summarised when the server starts,
before this). A decided experiment's summary becomes rows of kinds here, outside the result's
transaction (on SQLite every other writer would wait on it); the experiment's `changes_parsed`
says that it was done.

Only what counts is read: decided experiments of one track (kept, reverted or stale; a `rebased`
one's change goes on as its copy) with a base, at least one of whose runs reported on the track's
platform and harness, and of their kinds those that can change a run on the platform's device (`counts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

from sqlalchemy import bindparam, delete, exists, func, insert, select, update
from sqlalchemy.orm import Session

from harness.runner.devices import platform_device
from protocol.constants import counts_on
from protocol.states import Decision, Direction, Part
from server.crud.similar import stored_summary
from server.models import CHANGE_KINDS, EXPERIMENTS, RESULTS, Experiment, ExperimentChange
from server.rules.keep_rates import Kind, Outcome, kinds_of
from server.rules.near_misses import Measured
from server.trainpy.changes import ChangeSummary

# A change that sets more constants (or touches more regions) than this is a rewrite, not a kind
# of change: it counts under its first ones only, so that one submission cannot write thousands
# of rows. Names longer than NAME_CHARS are cut (the column's size).
MAX_KINDS_PER_PART = 64
NAME_CHARS = 200
COUNTED_DECISIONS = (Decision.KEEP, Decision.REVERT, Decision.STALE)


def rows_of(experiment_id: int, summary: ChangeSummary) -> list[dict[str, Any]]:
    """The change_kinds rows of a change (at most MAX_KINDS_PER_PART of each part)."""
    values = {change.name: (change.old, change.new) for change in summary.constants}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    taken = dict.fromkeys(Part, 0)
    for kind in kinds_of(summary):
        name = kind.name[:NAME_CHARS]
        if taken[kind.part] == MAX_KINDS_PER_PART or (kind.part, name) in rows:
            continue
        taken[kind.part] += 1
        old, new = values.get(kind.name, (None, None))
        rows[(kind.part, name)] = {
            "experiment_id": experiment_id,
            "part": kind.part.value,
            "name": name,
            "direction": kind.direction.value if kind.direction else None,
            "old": _finite(old),
            "new": _finite(new),
        }
    return list(rows.values())


def _finite(value: float | None) -> float | None:
    """A constant's value as a float column holds it (an int past the float range: unknown)."""
    try:
        return float(value) if value is not None else None
    except OverflowError:
        return None


_PENDING = (
    select(ExperimentChange)
    .join(Experiment, Experiment.id == ExperimentChange.experiment_id)
    .where(
        Experiment.changes_parsed.is_(None),  # ix_experiments_changes_parsed
        Experiment.decision.is_not(None),
        Experiment.base_commit.is_not(None),
    )
    .order_by(Experiment.id)
    .limit(bindparam("n"))
)
_MARK = (
    update(EXPERIMENTS)
    .where(EXPERIMENTS.c.id == bindparam("experiment_id"))
    .values(changes_parsed=bindparam("parsed"))
)


def pending(session: Session, limit: int) -> dict[int, ChangeSummary]:
    """The stored summaries of up to `limit` decided experiments whose kinds are not stored yet."""
    return {row.experiment_id: stored_summary(row) for row in session.scalars(_PENDING, {"n": limit})}


def store_kinds(session: Session, summaries: dict[int, ChangeSummary]) -> None:
    """Replace these experiments' kinds with those of their summaries and mark them counted."""
    rows = [kind for id_, summary in summaries.items() for kind in rows_of(id_, summary)]
    connection = session.connection()
    connection.execute(delete(CHANGE_KINDS).where(CHANGE_KINDS.c.experiment_id.in_(list(summaries))))
    if rows:
        connection.execute(insert(CHANGE_KINDS), rows)
    marks = [{"experiment_id": id_, "parsed": summary.parsed} for id_, summary in summaries.items()]
    connection.execute(_MARK, marks)


def _counted(track_id: int, platform: str | None, harness_id: str | None) -> Any:
    """The experiments of a track keep rates count (see the module's docstring)."""
    on_the_platform = exists().where(
        RESULTS.c.experiment_id == EXPERIMENTS.c.id,
        RESULTS.c.device == platform,
        RESULTS.c.harness_id == harness_id,
    )
    return (
        (EXPERIMENTS.c.track_id == track_id)
        & EXPERIMENTS.c.decision.in_(COUNTED_DECISIONS)
        & EXPERIMENTS.c.base_commit.is_not(None)
        & EXPERIMENTS.c.changes_parsed.is_not(None)
        & on_the_platform
    )


def counts(part: str, name: str, device: str | None) -> bool:
    """Whether a stored kind counts on a platform of `device`: a knob of another device changed
    nothing its runs could measure (protocol.constants.counts_on)."""
    return part != Part.CONSTANT or counts_on(name, device)


def outcomes(session: Session, track_id: int, platform: str | None, harness_id: str | None) -> list[Outcome]:
    """Every counted experiment of the track with its kinds on the platform's device, for
    keep_rates(): one query."""
    statement = (
        select(
            EXPERIMENTS.c.id,
            EXPERIMENTS.c.decision,
            EXPERIMENTS.c.valid_runs,
            EXPERIMENTS.c.effect,
            EXPERIMENTS.c.effect_se,
            EXPERIMENTS.c.changes_parsed,
            CHANGE_KINDS.c.part,
            CHANGE_KINDS.c.name,
            CHANGE_KINDS.c.direction,
        )
        .select_from(EXPERIMENTS.outerjoin(CHANGE_KINDS, CHANGE_KINDS.c.experiment_id == EXPERIMENTS.c.id))
        .where(_counted(track_id, platform, harness_id))
        .order_by(EXPERIMENTS.c.id)
    )
    found = []
    known: dict[tuple[str, str, str | None], Kind] = {}  # one Kind per kind: thousands of rows share them
    device = platform_device(platform)
    for _, group in groupby(session.execute(statement), key=lambda row: row[0]):
        rows = list(group)
        id_, decision, valid_runs, effect, se, parsed = rows[0][:6]
        kinds = []
        for *_, part, name, direction in rows:
            if part is None or not counts(part, name, device):
                continue  # no kinds (nothing parsed: one row, without a kind), or another device's knob
            key = (part, name, direction)
            if key not in known:
                known[key] = Kind(Part(part), name, Direction(direction) if direction else None)
            kinds.append(known[key])
        found.append(
            Outcome(id_, decision == Decision.KEEP, valid_runs > 0, effect, se, tuple(kinds), bool(parsed))
        )
    return found


def stored(session: Session, experiment_ids: Sequence[int], platform: str | None) -> dict[int, list[Any]]:
    """The stored kinds of these experiments that count on `platform`, as rows (part, name,
    direction, old, new), by id."""
    if not experiment_ids:
        return {}
    statement = (
        select(CHANGE_KINDS)
        .where(CHANGE_KINDS.c.experiment_id.in_(experiment_ids))
        .order_by(CHANGE_KINDS.c.experiment_id, CHANGE_KINDS.c.part, CHANGE_KINDS.c.name)
    )
    found: dict[int, list[Any]] = {}
    device = platform_device(platform)
    for row in session.execute(statement):
        if counts(row.part, row.name, device):
            found.setdefault(row.experiment_id, []).append(row)
    return found


_REVERTED_AND_GAINED = select(
    EXPERIMENTS.c.id,
    EXPERIMENTS.c.effect,
    EXPERIMENTS.c.effect_se,
    EXPERIMENTS.c.compared_runs,
    EXPERIMENTS.c.best_runs,
).where(
    EXPERIMENTS.c.decision == Decision.REVERT,
    EXPERIMENTS.c.valid_runs > 0,
    EXPERIMENTS.c.effect.is_not(None),
    EXPERIMENTS.c.compared_runs.is_not(None),
    # Most reverted experiments measured worse: only gains are read (the rule is near_misses()).
    EXPERIMENTS.c.effect < 0,
)


def reverted_gains(session: Session, track_id: int, platform: str | None) -> list[Measured]:
    """The track's reverted experiments measured better than what they were compared with, on its
    platform: what near_misses() ranks."""
    statement = _REVERTED_AND_GAINED.where(
        EXPERIMENTS.c.track_id == track_id, EXPERIMENTS.c.platform == platform
    )
    rows = session.execute(statement)
    return [
        Measured(row.id, row.effect, row.effect_se, row.compared_runs, row.best_runs or 0) for row in rows
    ]


_DECIDED = select(func.count(), func.coalesce(func.sum(EXPERIMENTS.c.id), 0)).where(
    EXPERIMENTS.c.decision.is_not(None), EXPERIMENTS.c.changes_parsed.is_not(None)
)


def decided(session: Session) -> tuple[int, int]:
    """How many experiments are decided with their change summarised, and the sum of their ids:
    what changes when a decision counts in keep rates and near misses."""
    count, ids = session.execute(_DECIDED).one()
    return int(count), int(ids)
