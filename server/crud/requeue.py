"""Queueing an experiment again after it ended without a verdict on its change.

Two callers: an admin's retry (POST /experiments/{id}/retry, once broken workers are fixed) and
a track's best that has no valid measurement, queued again whenever a server starts or `init` runs
on an existing project (a baseline whose runs all lost their workers would otherwise leave the
track unable to compare anything, for good).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from protocol.states import RETRYABLE_STATUSES, ExperimentStatus, RunState
from server.crud.leases import best_measurement
from server.models import RUNS, Experiment, Result
from server.rules.lifecycle import move_experiment


def has_result(session: Session, experiment_id: int) -> bool:
    return session.scalar(select(Result.id).where(Result.experiment_id == experiment_id).limit(1)) is not None


def queue_again(session: Session, experiment: Experiment, now: datetime) -> int:
    """Put a retryable experiment (RETRYABLE_STATUSES, no result) back at the end of the queue:
    its cancelled and infra_failed runs are queued with their attempts reset and their seeds kept.
    Returns how many runs were queued. The caller checks that it is retryable."""
    assert experiment.status in RETRYABLE_STATUSES
    move_experiment(experiment, ExperimentStatus.QUEUED)
    experiment.cancel_requested = False
    experiment.queued_at = now
    experiment.started_at = experiment.finished_at = None
    experiment.decision = experiment.decision_reason = None
    result = session.connection().execute(
        update(RUNS)
        .where(
            RUNS.c.experiment_id == experiment.id,
            RUNS.c.status.in_((RunState.CANCELLED, RunState.INFRA_FAILED)),
        )
        .values(status=RunState.QUEUED, attempts=0, queued_at=now, started_at=None, finished_at=None)
    )
    return int(result.rowcount or 0)


def unmeasured_best(session: Session, track_id: int) -> Experiment | None:
    """The track's best, when it has no valid run and nothing that could give it one is queued or
    running."""
    best = best_measurement(session, track_id)
    if best is None or best.valid_runs > 0 or best.live_runs > 0:
        return None
    return session.get(Experiment, best.experiment_id)


def requeue_unmeasured_best(session: Session, track_id: int, now: datetime) -> Experiment | None:
    """Queue the track's best again when it is unmeasured and ended without a fault of its own (its runs
    lost their workers, or it was cancelled); returns it, or None when there was nothing to do.
    A best whose own run failed (it crashed: a result) is not queued again: it cannot be measured
    as it is, and the first valid result replaces it (docs/api.md, "Decisions")."""
    best = unmeasured_best(session, track_id)
    if best is None or best.status not in RETRYABLE_STATUSES or has_result(session, best.id):
        return None
    queue_again(session, best, now)
    return best
