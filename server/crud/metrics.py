"""What GET /metrics reads at scrape time: a handful of indexed aggregates (server/metrics.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from protocol.states import RunState
from server.models import Experiment, Result, Run


class Durations(NamedTuple):
    """The runs' wall times as a cumulative histogram: how many, their sum, how many under each bound."""

    runs: int
    total: float
    buckets: list[int]


def experiments_by_status(session: Session) -> dict[str, int]:
    statement = select(Experiment.status, func.count()).group_by(Experiment.status)
    return {status: count for status, count in session.execute(statement)}


def live_runs_by_state(session: Session) -> dict[str, int]:
    """The runs queued and running, by state."""
    statement = (
        select(Run.status, func.count())
        .where(Run.status.in_((RunState.QUEUED, RunState.RUNNING)))
        .group_by(Run.status)
    )
    return {state: count for state, count in session.execute(statement)}


def run_durations(session: Session, bounds: Sequence[float]) -> Durations:
    bucket_columns = [func.sum(case((Result.total_seconds <= bound, 1), else_=0)) for bound in bounds]
    row = session.execute(
        select(
            func.count(Result.total_seconds),
            func.coalesce(func.sum(Result.total_seconds), 0.0),
            *bucket_columns,
        )
    ).one()
    return Durations(row[0], row[1], list(row[2:]))
