"""Recording a worker's result and deciding on it, exactly once per result_id."""

from __future__ import annotations

from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from server.context import AppContext
from server.core.problems import Problem
from server.crud.leases import FINISHED, locked_lease, require_held, set_lease
from server.crud.tokens import Principal
from server.decisions import decide
from server.models import CANCELLED, Experiment, Result, utcnow
from server.schemas import ResultIn, ResultOutcome

RESULT_COLUMNS = frozenset(Result.__table__.columns.keys())
_INSERT_RESULT = insert(Result.__table__)


def _outcome(experiment: Experiment) -> ResultOutcome:
    return ResultOutcome(
        experiment_id=experiment.id,
        decision=experiment.decision,  # type: ignore[arg-type]
        status=experiment.status,  # type: ignore[arg-type]
        reason=experiment.decision_reason or "",
    )


def _already_recorded(session: Session, lease_id: str, result_id: str) -> ResultOutcome | None:
    stored = session.get(Result, result_id)
    if stored is None:
        return None
    if stored.lease_id != lease_id:
        raise Problem(409, "result-id-reused", f"result_id {result_id} was recorded for another lease")
    experiment = session.get(Experiment, stored.experiment_id)
    assert experiment is not None
    return _outcome(experiment)


def record_result(ctx: AppContext, principal: Principal, lease_id: str, body: ResultIn) -> ResultOutcome:
    result_id = body.result_id.lower()
    with ctx.transaction() as tx:
        lease = locked_lease(ctx, tx.session, principal, lease_id)
        if lease.state == FINISHED:
            replay = _already_recorded(tx.session, lease_id, result_id)
            if replay is not None:
                return replay
        require_held(ctx, tx.session, lease)
        experiment = tx.session.get(Experiment, lease.experiment_id, with_for_update=True)
        assert experiment is not None
        now = utcnow()
        set_lease(tx.session, lease.id, state=FINISHED, ended_at=now)
        measured = body.result
        fields = measured.model_dump(mode="json")
        extra = {key: fields.pop(key) for key in list(fields) if key not in RESULT_COLUMNS}
        row = {
            "id": result_id,
            "experiment_id": experiment.id,
            "lease_id": lease.id,
            "worker_id": lease.worker_id,
            "received_at": now,
            "extra": extra,
            **fields,
        }
        try:
            tx.session.connection().execute(_INSERT_RESULT, row)
        except IntegrityError as exc:  # the primary key: this result_id was used for another lease
            raise Problem(
                409, "result-id-reused", f"result_id {result_id} was recorded for another lease"
            ) from exc
        experiment.finished_at = now
        experiment.platform = measured.device
        experiment.val_bpb = measured.val_bpb if measured.status == "ok" else None
        tx.emit(
            "finished", experiment_id=experiment.id, result_status=measured.status, val_bpb=measured.val_bpb
        )
        if experiment.cancel_requested:
            experiment.status = CANCELLED
            experiment.decision_reason = "cancelled while running; its result is recorded but not compared"
        else:
            decide(ctx, tx, experiment, measured)
        return _outcome(experiment)
