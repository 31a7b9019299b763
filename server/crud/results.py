"""The rows of a run's result: the result itself, its run finished, its experiment's new values.

Persistence only (server/flows/results.py records a result and decides on it). Workers report
results all the time, so these are plain Core statements on the transaction's connection.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from protocol.schemas import ResultOutcome
from protocol.states import RunState
from server.core.problems import Problem
from server.models import EXPERIMENTS, RESULTS, RUNS, AnyRow, Experiment, Result, Run

RESULT_COLUMNS = frozenset(RESULTS.columns.keys())
_INSERT_RESULT = insert(RESULTS)
_LOCK_EXPERIMENT = select(EXPERIMENTS).where(EXPERIMENTS.c.id == bindparam("id")).with_for_update()
_RUN = select(RUNS).where(RUNS.c.id == bindparam("id"))
_FINISH_RUN = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("run_id"))
    .values(status=bindparam("state"), finished_at=bindparam("now", type_=RUNS.c.finished_at.type))
)
# The SET clause comes from the parameters: the columns the result and its decision change.
_UPDATE_EXPERIMENT = update(EXPERIMENTS).where(EXPERIMENTS.c.id == bindparam("experiment_id"))


def already_recorded(session: Session, lease_id: str, result_id: str) -> ResultOutcome | None:
    """The answer given when `result_id` was recorded for this lease (a retried request), None
    when it was not recorded; 409 when it was recorded for another lease."""
    stored = session.get(Result, result_id)
    if stored is None:
        return None
    if stored.lease_id != lease_id:
        raise Problem(409, "result-id-reused", f"result_id {result_id} was recorded for another lease")
    experiment = session.get(Experiment, stored.experiment_id)
    assert experiment is not None
    number = run_row(session, stored.run_id).number
    return ResultOutcome(
        experiment_id=experiment.id,
        run=number,
        decision=experiment.decision,
        status=experiment.status,
        reason=experiment.decision_reason or "",
    )


def locked_experiment(session: Session, experiment_id: int) -> AnyRow:
    return session.connection().execute(_LOCK_EXPERIMENT, {"id": experiment_id}).one()


def run_row(session: Session, run_id: int) -> AnyRow:
    return session.connection().execute(_RUN, {"id": run_id}).one()


def finish_run(session: Session, run_id: int, now: datetime, state: RunState) -> None:
    """The run ended with a result: FINISHED, or SLOWED (not counted, run again)."""
    session.connection().execute(_FINISH_RUN, {"run_id": run_id, "now": now, "state": state})


def insert_result(session: Session, row: dict[str, Any]) -> None:
    """Store a result row; 409 when its id was used for another lease (the primary key)."""
    try:
        session.connection().execute(_INSERT_RESULT, row)
    except IntegrityError as exc:
        raise Problem(
            409, "result-id-reused", f"result_id {row['id']} was recorded for another lease"
        ) from exc


def update_experiment(session: Session, experiment_id: int, changes: dict[str, object]) -> None:
    session.connection().execute(_UPDATE_EXPERIMENT, {"experiment_id": experiment_id, **changes})


def latest_result(session: Session, experiment_id: int, number: int | None = None) -> Result | None:
    """The result of the experiment's run `number`, or of its latest run with one."""
    statement = select(Result).join(Run, Run.id == Result.run_id).where(Result.experiment_id == experiment_id)
    if number is not None:
        statement = statement.where(Run.number == number)
    return session.scalars(statement.order_by(Run.number.desc()).limit(1)).first()
