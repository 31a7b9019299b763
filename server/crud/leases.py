"""The rows of the worker side of the queue: runs picked under a lease, leases, progress samples.

Persistence only (server/flows/leases.py is what a claim, heartbeat, progress report, release or
expiry does with them). The worker endpoints are what a fleet calls most, so their statements are
plain Core, built once here and run on the transaction's connection: no ORM unit of work, no
identity map. Claims are atomic: the queued run is picked with `SELECT ... FOR UPDATE SKIP
LOCKED` on PostgreSQL (concurrent claims skip each other's rows instead of waiting) and inside a
`BEGIN IMMEDIATE` transaction on SQLite (one writer at a time), so each run goes to exactly one
worker. A worker is given runs of the tracks it serves only (each run carries its experiment's
track). Order is FIFO by `queued_at`, which a run takes from its experiment; a run requeued after
a lost lease keeps it too, so it runs before everything submitted after its experiment.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Update, bindparam, case, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from protocol.schemas import ProgressEventIn
from protocol.states import ExperimentStatus, LeaseState, RunState
from server.crud import integrity
from server.crud import noise as noise_crud
from server.crud.runs import live_runs
from server.crud.tracks import current_best
from server.models import (
    EXPERIMENTS,
    LEASES,
    RUNS,
    TRACKS,
    AnyRow,
    Experiment,
    Lease,
    ProgressSample,
    Run,
    Worker,
    utcnow,
)
from server.rules.gate import BestMeasurement
from server.rules.lifecycle import experiment_sources


def write_seen(session: Session, worker_id: str) -> None:
    session.execute(update(Worker).where(Worker.id == worker_id).values(last_seen_at=utcnow()))


def worker_row(session: Session, worker_id: str) -> Worker | None:
    return session.get(Worker, worker_id)


_ANYTHING_QUEUED = (
    select(RUNS.c.id)
    .where(RUNS.c.status == RunState.QUEUED, RUNS.c.track_id.in_(bindparam("tracks", expanding=True)))
    .limit(1)
)


def anything_queued(session: Session, tracks: Sequence[int]) -> bool:
    """Whether a run of one of these tracks is queued."""
    found = session.connection().execute(_ANYTHING_QUEUED, {"tracks": list(tracks)}).first()
    return found is not None


_OF_TRACKS = RUNS.c.track_id.in_(bindparam("tracks", expanding=True))


def _claim_statement(gated: bool) -> Update:
    """Take the first claimable queued run of the tracks bound as `tracks` (and, `gated`, of the
    experiments bound as `gates`, the bests not yet measured of the worker's other tracks): one
    UPDATE ... RETURNING around a locked pick. Runs of experiments held for their agent's integrity
    event (server/crud/integrity.py) are skipped."""
    mine = (
        or_(_OF_TRACKS, RUNS.c.experiment_id.in_(bindparam("gates", expanding=True))) if gated else _OF_TRACKS
    )
    pick = select(RUNS.c.id).where(
        RUNS.c.status == RunState.QUEUED, mine, RUNS.c.experiment_id.not_in(integrity.HELD_EXPERIMENTS)
    )
    pick = pick.order_by(RUNS.c.queued_at, RUNS.c.id).limit(1)
    pick = pick.with_for_update(skip_locked=True)
    return (
        update(RUNS)
        .where(RUNS.c.id == pick.scalar_subquery(), RUNS.c.status == RunState.QUEUED)
        .values(
            status=RunState.RUNNING,
            attempts=RUNS.c.attempts + 1,
            started_at=bindparam("now", type_=RUNS.c.started_at.type),
        )
        .returning(RUNS.c.id, RUNS.c.experiment_id, RUNS.c.number, RUNS.c.seed, RUNS.c.attempts)
    )


_CLAIM = _claim_statement(gated=False)
_CLAIM_GATED = _claim_statement(gated=True)
# The claimed run's experiment: running, unless already decided (a repeat of the best).
_MAY_START = EXPERIMENTS.c.status.in_(experiment_sources(ExperimentStatus.RUNNING))
_START_EXPERIMENT = (
    update(EXPERIMENTS)
    .where(EXPERIMENTS.c.id == bindparam("experiment_id"))
    .values(
        status=case(
            (
                _MAY_START,
                ExperimentStatus.RUNNING,
            ),
            else_=EXPERIMENTS.c.status,
        ),
        started_at=case(
            (
                _MAY_START,
                bindparam("now", type_=EXPERIMENTS.c.started_at.type),
            ),
            else_=EXPERIMENTS.c.started_at,
        ),
    )
    .returning(
        EXPERIMENTS.c.commit_sha, EXPERIMENTS.c.description, EXPERIMENTS.c.base_commit, EXPERIMENTS.c.track_id
    )
)
_BEST_COMMIT = select(TRACKS.c.best_commit).where(TRACKS.c.id == bindparam("track_id"))
_INSERT_LEASE = insert(LEASES)
_LOCK_LEASE = select(LEASES).where(LEASES.c.id == bindparam("lease_id")).with_for_update()
_UPDATE_LEASE = update(LEASES).where(LEASES.c.id == bindparam("lease_id"))
_INSERT_PROGRESS = insert(ProgressSample)


def best_measurement(session: Session, track_id: int) -> BestMeasurement | None:
    """What the gate reads of the track's best (server/rules/gate.py); None when there is no best yet."""
    track = current_best(session, track_id)
    if track.best_experiment_id is None:
        return None
    best = session.get(Experiment, track.best_experiment_id)
    assert best is not None
    noise = noise_crud.current_view(session, track.id, track.platform, track.harness_id, track.name)
    return BestMeasurement(
        experiment_id=best.id,
        status=best.status,
        valid_runs=best.valid_runs,
        noise_runs=noise.runs if noise is not None else None,
        live_runs=live_runs(session, best.id),
    )


_MADE_HERE = (
    select(func.count())
    .select_from(LEASES.join(RUNS, RUNS.c.id == LEASES.c.run_id))
    .where(LEASES.c.worker_id == bindparam("worker_id"), RUNS.c.track_id == bindparam("track_id"))
)
_OTHER_HERE = (
    select(LEASES.c.id)
    .join(RUNS, RUNS.c.id == LEASES.c.run_id)
    .where(LEASES.c.worker_id != bindparam("worker_id"), RUNS.c.track_id == bindparam("track_id"))
    .limit(1)
)


def runs_made(session: Session, worker_id: str, track_id: int) -> tuple[int, bool]:
    """The runs of the track this worker was given (its leases), and whether another worker was
    given any."""
    params = {"worker_id": worker_id, "track_id": track_id}
    connection = session.connection()
    made = int(connection.execute(_MADE_HERE, params).scalar() or 0)
    return made, connection.execute(_OTHER_HERE, params).first() is not None


def pick_run(
    session: Session, now: datetime, tracks: Sequence[int], gates: Sequence[int] = ()
) -> AnyRow | None:
    """The first claimable queued run of these tracks, or of the experiments `gates`, now running:
    its id, experiment_id, number, seed and attempts; None when there is none."""
    connection = session.connection()
    if not gates:
        return connection.execute(_CLAIM, {"now": now, "tracks": list(tracks)}).first()
    return connection.execute(
        _CLAIM_GATED, {"now": now, "tracks": list(tracks), "gates": list(gates)}
    ).first()


def start_experiment(session: Session, experiment_id: int, now: datetime) -> AnyRow:
    """Mark the claimed run's experiment running (unless decided); its commit, description, base
    and track."""
    return session.connection().execute(_START_EXPERIMENT, {"experiment_id": experiment_id, "now": now}).one()


def best_commit(session: Session, track_id: int) -> str | None:
    return session.connection().execute(_BEST_COMMIT, {"track_id": track_id}).scalar()


def insert_lease(session: Session, lease: dict[str, Any]) -> None:
    session.connection().execute(_INSERT_LEASE, lease)


def lease_row(session: Session, lease_id: str) -> AnyRow | None:
    """The lease, row-locked (PostgreSQL), in any state."""
    return session.connection().execute(_LOCK_LEASE, {"lease_id": lease_id}).first()


def set_lease(session: Session, lease_id: str, **values: object) -> None:
    """Change the lease's columns named in `values` (the parameters make the SET clause)."""
    session.connection().execute(_UPDATE_LEASE, {"lease_id": lease_id, **values})


def cancel_requested(session: Session, experiment_id: int) -> bool:
    return bool(session.scalar(select(Experiment.cancel_requested).where(Experiment.id == experiment_id)))


def run_number(session: Session, run_id: int) -> int:
    number = session.scalar(select(Run.number).where(Run.id == run_id))
    assert number is not None
    return number


def add_progress(session: Session, lease: AnyRow, events: Sequence[ProgressEventIn], limit: int) -> None:
    """Store progress samples of the lease's run, keeping at most `limit` per run.

    Only the latest attempt's samples of a run are kept. Past the bound, the sample whose
    neighbours are closest (in steps) is dropped, again and again: the stored curve keeps its
    first and last points and stays evenly spread over the whole run, however long it gets.
    """
    # One executemany on the connection: through the ORM each sample cost about ten times as
    # much, and a fleet sends many (docs/benchmarks.md, "Fleet").
    session.connection().execute(
        _INSERT_PROGRESS,
        [
            {
                "experiment_id": lease.experiment_id,
                "run_id": lease.run_id,
                "attempt": lease.attempt,
                "step": e.step,
                "loss": e.loss,
                "tokens_per_s": e.tokens_per_s,
                "fraction": e.fraction,
                "phase": e.phase,
                "elapsed_s": e.elapsed_s,
            }
            for e in events
        ],
    )
    _thin_progress(session, lease.experiment_id, lease.run_id, lease.attempt, limit)


def _thin_progress(session: Session, experiment_id: int, run_id: int, attempt: int, limit: int) -> None:
    session.execute(
        delete(ProgressSample).where(
            ProgressSample.experiment_id == experiment_id,
            ProgressSample.run_id == run_id,
            ProgressSample.attempt < attempt,
        )
    )
    mine = (
        (ProgressSample.experiment_id == experiment_id)
        & (ProgressSample.run_id == run_id)
        & (ProgressSample.attempt == attempt)
    )
    if (session.scalar(select(func.count()).where(mine)) or 0) <= limit:
        return
    kept = list(
        session.execute(
            select(ProgressSample.id, ProgressSample.step).where(mine).order_by(ProgressSample.id)
        )
    )
    dropped = []
    while len(kept) > limit:
        crowded = min(range(1, len(kept) - 1), key=lambda i: kept[i + 1].step - kept[i - 1].step)
        dropped.append(kept.pop(crowded).id)
    session.execute(delete(ProgressSample).where(ProgressSample.id.in_(dropped)))


def progress_of(
    session: Session, experiment_id: int, run: int | None = None
) -> tuple[int | None, list[ProgressSample]]:
    """The run's (default: the latest run with samples) number and the stored samples of its latest
    attempt, oldest first."""
    runs = select(Run.id, Run.number).where(Run.experiment_id == experiment_id)
    if run is not None:
        runs = runs.where(Run.number == run)
    else:
        runs = runs.where(
            Run.id.in_(select(ProgressSample.run_id).where(ProgressSample.experiment_id == experiment_id))
        )
    chosen = session.execute(runs.order_by(Run.number.desc()).limit(1)).first()
    if chosen is None:
        return run, []
    in_run = (ProgressSample.experiment_id == experiment_id) & (ProgressSample.run_id == chosen.id)
    attempt = session.scalar(select(func.max(ProgressSample.attempt)).where(in_run))
    if attempt is None:
        return chosen.number, []
    statement = (
        select(ProgressSample).where(in_run, ProgressSample.attempt == attempt).order_by(ProgressSample.id)
    )
    return chosen.number, list(session.scalars(statement))


def any_expired(session: Session, now: datetime) -> bool:
    expired = select(Lease.id).where(Lease.state == LeaseState.ACTIVE, Lease.expires_at <= now)
    return session.scalar(expired.limit(1)) is not None


def expired_leases(session: Session, now: datetime) -> list[Lease]:
    """The active leases past their expiry, row-locked (skipping those another transaction holds)."""
    return list(
        session.scalars(
            select(Lease)
            .where(Lease.state == LeaseState.ACTIVE, Lease.expires_at <= now)
            .with_for_update(skip_locked=True)
        )
    )


def locked_run(session: Session, experiment_id: int, run_id: int) -> tuple[Experiment, Run]:
    """A lease's experiment and run, row-locked in that order (server/flows/submit.py's lock order)."""
    experiment = session.get(Experiment, experiment_id, with_for_update=True)
    run = session.get(Run, run_id, with_for_update=True)
    assert experiment is not None and run is not None
    return experiment, run
