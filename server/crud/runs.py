"""Runs: queueing them (with their seeds), and reading an experiment's runs.

An experiment is run once, and again when the decision rule asks for confirmation runs or when it
is the best (repeats measure the noise and make its value more precise). A run takes its
experiment's place in the queue (its `queued_at`), so confirmation runs and repeats of the best go
ahead of everything submitted after that experiment.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, bindparam, case, func, insert, literal, or_, select, union_all, update
from sqlalchemy.orm import Session, aliased

from protocol.states import RunKind, RunState
from server.models import EXPERIMENTS, RUNS, TRACKS, AnyRow, Run

SEED_BITS = 31  # seeds fit a C int: every library takes them


def new_seed() -> int:
    """A run's seed, drawn from the operating system's secret source when the run is queued and
    stored with it: no candidate can know it before it runs (a seed computed from public numbers,
    the experiment's id and the run's, could be looked up in a table of initialisations found
    lucky offline), and every retry of the run (a lost lease) uses the same one. The feeder orders
    the run's training data by it too (harness.runner.feeder)."""
    return secrets.randbits(SEED_BITS)


_INSERT_RUN = insert(RUNS)
_LAST_NUMBER = select(func.max(RUNS.c.number)).where(RUNS.c.experiment_id == bindparam("experiment_id"))
_COUNT = select(func.count()).where(RUNS.c.experiment_id == bindparam("experiment_id"))
_COUNT_LIVE = select(func.count()).where(
    RUNS.c.experiment_id == bindparam("experiment_id"),
    RUNS.c.status.in_((RunState.QUEUED, RunState.RUNNING)),
)


def queue_runs(
    session: Session,
    experiment_id: int,
    track_id: int,
    kind: RunKind,
    queued_at: datetime,
    count: int = 1,
    *,
    new: bool = False,
) -> list[int]:
    """Queue `count` more runs of an experiment (of track `track_id`); returns their numbers. `new`:
    the experiment was inserted in this transaction, so it has no runs yet (one query less)."""
    last = 0
    if not new:
        last = session.connection().execute(_LAST_NUMBER, {"experiment_id": experiment_id}).scalar() or 0
    numbers = list(range(last + 1, last + 1 + count))
    if numbers:
        session.connection().execute(
            _INSERT_RUN,
            [
                {
                    "experiment_id": experiment_id,
                    "track_id": track_id,
                    "number": number,
                    "seed": new_seed(),
                    "kind": kind,
                    "status": RunState.QUEUED,
                    "attempts": 0,
                    "queued_at": queued_at,
                }
                for number in numbers
            ],
        )
    return numbers


def count_runs(
    session: Session, experiment_id: int, kind: RunKind | None = None, state: RunState | None = None
) -> int:
    """How many runs the experiment has had (any state), or of one kind, or in one state."""
    statement = _COUNT.where(RUNS.c.kind == kind) if kind is not None else _COUNT
    statement = statement.where(RUNS.c.status == state) if state is not None else statement
    return int(session.connection().execute(statement, {"experiment_id": experiment_id}).scalar() or 0)


def live_runs(session: Session, experiment_id: int) -> int:
    """Its runs queued or running now."""
    return int(session.connection().execute(_COUNT_LIVE, {"experiment_id": experiment_id}).scalar() or 0)


def cancel_queued_runs(session: Session, experiment_id: int, now: datetime) -> int:
    """Drop the experiment's runs that have not started; returns how many."""
    result = session.connection().execute(
        update(RUNS)
        .where(RUNS.c.experiment_id == experiment_id, RUNS.c.status == RunState.QUEUED)
        .values(status=RunState.CANCELLED, finished_at=now)
    )
    return int(result.rowcount or 0)


# A queued run's place in its track's queue: the queued runs of the track claimed before it
# (queued_at, then id).
_AHEAD = aliased(Run)
_PLACE = case(
    (
        Run.status == RunState.QUEUED,
        select(func.count())
        .where(
            _AHEAD.status == RunState.QUEUED,
            _AHEAD.track_id == Run.track_id,
            or_(
                _AHEAD.queued_at < Run.queued_at,
                and_(_AHEAD.queued_at == Run.queued_at, _AHEAD.id < Run.id),
            ),
        )
        .correlate(Run)
        .scalar_subquery(),
    )
)
_OF = Run.experiment_id.in_(bindparam("ids", expanding=True))
_RUNS_OF = select(Run).where(_OF).order_by(Run.experiment_id, Run.number)
_RUNS_AND_PLACES_OF = select(Run, _PLACE).where(_OF).order_by(Run.experiment_id, Run.number)


def runs_of(
    session: Session, experiment_ids: list[int], *, with_places: bool = False
) -> tuple[dict[int, list[Run]], dict[int, int]]:
    """The runs of these experiments, by experiment, in run order; with `with_places`, the place
    in the queue of each queued one (run id: queued runs ahead of it), read in the same query."""
    found: dict[int, list[Run]] = {i: [] for i in experiment_ids}
    places: dict[int, int] = {}
    if not experiment_ids:
        return found, places
    statement = _RUNS_AND_PLACES_OF if with_places else _RUNS_OF
    for run, *place in session.execute(statement, {"ids": experiment_ids}):
        found[run.experiment_id].append(run)
        if place and place[0] is not None:
            places[run.id] = place[0]
    return found, places


_ACTIVE_TRACKS = select(TRACKS.c.id, TRACKS.c.name).where(TRACKS.c.archived_at.is_(None))


def queued_by_track(session: Session, limit: int) -> dict[str, int]:
    """How many runs are queued on each track not archived (by name), counting at most `limit` of
    each (on the queue index), in one statement."""
    tracks = session.execute(_ACTIVE_TRACKS).all()
    if not tracks:
        return {}
    counts = [
        select(
            literal(track_id).label("track_id"),
            select(func.count())
            .select_from(
                select(RUNS.c.id)
                .where(RUNS.c.status == RunState.QUEUED, RUNS.c.track_id == track_id)
                .limit(limit)
                .subquery()
            )
            .scalar_subquery()
            .label("queued"),
        )
        for track_id, _name in tracks
    ]
    found = {row.track_id: int(row.queued or 0) for row in session.execute(union_all(*counts))}
    return {name: found.get(track_id, 0) for track_id, name in tracks}


# First runs queued on a former best of their track: the changes a claim will re-apply
# (server/flows/decisions.py, reapply_before_running), each with its track's best.
_QUEUED_ON_FORMER_BEST = (
    select(
        EXPERIMENTS.c.agent_id,
        EXPERIMENTS.c.description,
        EXPERIMENTS.c.hypothesis,
        EXPERIMENTS.c.base_commit,
        EXPERIMENTS.c.commit_sha,
        TRACKS.c.best_commit.label("best"),
    )
    .join(RUNS, RUNS.c.experiment_id == EXPERIMENTS.c.id)
    .join(TRACKS, TRACKS.c.id == EXPERIMENTS.c.track_id)
    .where(
        RUNS.c.number == 1,
        RUNS.c.status == RunState.QUEUED,
        EXPERIMENTS.c.decision.is_(None),
        EXPERIMENTS.c.base_commit != TRACKS.c.best_commit,
    )
    .order_by(RUNS.c.queued_at, RUNS.c.id)
)


def queued_on_former_best(session: Session, limit: int) -> Sequence[AnyRow]:
    """The first `limit` changes (in queue order) whose first run waits on a former best of their
    track, each with that track's best (`best`)."""
    return session.execute(_QUEUED_ON_FORMER_BEST.limit(limit)).all()
