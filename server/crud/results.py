"""Recording a worker's result for one run and deciding on it, exactly once per result_id."""

from __future__ import annotations

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from client.events import EventType, Finished
from client.schemas import ResultIn, ResultOutcome
from client.states import LeaseState, RunState
from harness.result import INTEGRITY_CLASSES
from server.context import AppContext
from server.core.problems import Problem
from server.crud import integrity
from server.crud.leases import locked_lease, require_held, set_lease
from server.crud.tokens import Principal
from server.decisions import decide
from server.lifecycle import check_experiment_move, check_run_move
from server.models import EXPERIMENTS, RESULTS, RUNS, Experiment, Result, utcnow

RESULT_COLUMNS = frozenset(RESULTS.columns.keys())
_INSERT_RESULT = insert(RESULTS)
_LOCK_EXPERIMENT = select(EXPERIMENTS).where(EXPERIMENTS.c.id == bindparam("id")).with_for_update()
_RUN = select(RUNS).where(RUNS.c.id == bindparam("id"))
_FINISH_RUN = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("run_id"))
    .values(status=RunState.FINISHED, finished_at=bindparam("now", type_=RUNS.c.finished_at.type))
)
# The SET clause comes from the parameters: the columns the result and its decision change.
_UPDATE_EXPERIMENT = update(EXPERIMENTS).where(EXPERIMENTS.c.id == bindparam("experiment_id"))


def _already_recorded(session: Session, lease_id: str, result_id: str) -> ResultOutcome | None:
    stored = session.get(Result, result_id)
    if stored is None:
        return None
    if stored.lease_id != lease_id:
        raise Problem(409, "result-id-reused", f"result_id {result_id} was recorded for another lease")
    experiment = session.get(Experiment, stored.experiment_id)
    assert experiment is not None
    number = session.connection().execute(_RUN, {"id": stored.run_id}).one().number
    return ResultOutcome(
        experiment_id=experiment.id,
        run=number,
        decision=experiment.decision,  # type: ignore[arg-type]
        status=experiment.status,  # type: ignore[arg-type]
        reason=experiment.decision_reason or "",
    )


def record_result(ctx: AppContext, principal: Principal, lease_id: str, body: ResultIn) -> ResultOutcome:
    """Store the run's result, decide on its experiment and end the lease, in one transaction.

    Workers report results all the time, so this is plain Core statements on the transaction's
    connection: the rows it reads are locked where they must be, and the experiment's new
    values (measurement and decision) are written with one UPDATE.
    """
    result_id = body.result_id.lower()
    with ctx.transaction() as tx:
        connection = tx.session.connection()
        lease = locked_lease(ctx, tx.session, principal, lease_id)
        if lease.state == LeaseState.FINISHED:
            replay = _already_recorded(tx.session, lease_id, result_id)
            if replay is not None:
                return replay
        require_held(ctx, tx.session, lease)
        experiment = connection.execute(_LOCK_EXPERIMENT, {"id": lease.experiment_id}).one()
        run = connection.execute(_RUN, {"id": lease.run_id}).one()
        measured = body.result
        if measured.seed is not None and run.seed is not None and measured.seed != run.seed:
            raise Problem(
                422,
                "seed-mismatch",
                f"run {run.number} of experiment {experiment.id} has seed {run.seed}; the result says it ran "
                f"with seed {measured.seed}",
            )
        now = utcnow()
        set_lease(tx.session, lease.id, state=LeaseState.FINISHED, ended_at=now)
        check_run_move(run.status, RunState.FINISHED)
        connection.execute(_FINISH_RUN, {"run_id": run.id, "now": now})
        fields = measured.model_dump(mode="json")
        fields["seed"] = run.seed if measured.seed is None else measured.seed
        extra = {key: fields.pop(key) for key in list(fields) if key not in RESULT_COLUMNS}
        row = {
            "id": result_id,
            "experiment_id": experiment.id,
            "run_id": run.id,
            "lease_id": lease.id,
            "worker_id": lease.worker_id,
            "received_at": now,
            "extra": extra,
            **fields,
        }
        try:
            connection.execute(_INSERT_RESULT, row)
        except IntegrityError as exc:  # the primary key: this result_id was used for another lease
            raise Problem(
                409, "result-id-reused", f"result_id {result_id} was recorded for another lease"
            ) from exc
        tx.emit(
            EventType.FINISHED,
            Finished(
                experiment_id=experiment.id,
                run=run.number,
                result_status=measured.status,
                val_bpb=measured.val_bpb,
            ),
        )
        changes: dict[str, object] = {"platform": measured.device}
        changes |= decide(ctx, tx, experiment, run, measured)
        if measured.error_class in INTEGRITY_CLASSES and experiment.agent_id is not None:
            event = integrity.record_event(
                connection, experiment.agent_id, experiment.id, result_id, measured.error_class, now
            )
            if "decision_reason" in changes:
                changes["decision_reason"] = (
                    f"{changes['decision_reason']}; integrity event {event}: this agent's queued "
                    "experiments are held until an admin clears it"
                )
        if "status" in changes:
            check_experiment_move(experiment.status, str(changes["status"]))
        connection.execute(_UPDATE_EXPERIMENT, {"experiment_id": experiment.id, **changes})
        return ResultOutcome(
            experiment_id=experiment.id,
            run=run.number,
            decision=changes.get("decision", experiment.decision),  # type: ignore[arg-type]
            status=changes.get("status", experiment.status),  # type: ignore[arg-type]
            reason=_reason(run.number, changes),
        )


def _reason(number: int, changes: dict[str, object]) -> str:
    """What this run's result decided, in words: the decision's reason, or, for a run of an
    experiment decided before it (a repeat of the best, a measuring run of the baseline), that it
    decided nothing: the old reason would read as if this run had decided it again."""
    if "decision_reason" in changes:
        return str(changes["decision_reason"] or "")
    runs = changes["valid_runs"]
    return f"run {number} of an experiment decided before it: {runs} valid runs now, nothing to decide"
