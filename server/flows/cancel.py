"""Ending an experiment before its decision (cancel), and queueing an ended one again (retry).

Each is one transaction with the experiment's row locked. A queued experiment is cancelled at
once; a running one is asked to stop (its worker sees `cancel` on its next heartbeat and releases
the run, server/flows/leases.py); a decided one cannot be cancelled. Cancelling twice is once: a
cancelled experiment, or a running one already asked to stop, is left as it is.
"""

from __future__ import annotations

from protocol.events import Finished, Queued
from protocol.states import FINAL_STATUSES, RETRYABLE_STATUSES, ExperimentStatus, TokenKind
from server.context import AppContext
from server.core.problems import Problem, unknown_experiment
from server.crud.requeue import has_result, queue_again
from server.crud.runs import cancel_queued_runs
from server.crud.tokens import Principal
from server.crud.tracks import name_of
from server.models import Experiment, utcnow
from server.rules.lifecycle import move_experiment


def cancel(ctx: AppContext, agent: Principal, experiment_id: int) -> None:
    """Cancel the caller's experiment (any, for an admin): at once while queued, by asking its
    worker to stop while running; nothing more when it is cancelled already; 409 once it is
    otherwise final."""
    with ctx.transaction() as tx:
        experiment = tx.session.get(Experiment, experiment_id, with_for_update=True)
        if experiment is None:
            raise unknown_experiment(experiment_id)
        if agent.kind != TokenKind.ADMIN and experiment.agent_id != agent.id:
            raise Problem(403, "not-yours", f"experiment {experiment_id} belongs to another agent")
        if experiment.status == ExperimentStatus.CANCELLED:
            return
        if experiment.status in FINAL_STATUSES:
            raise Problem(
                409, "already-finished", f"experiment {experiment_id} is already {experiment.status}"
            )
        if experiment.status == ExperimentStatus.QUEUED:
            move_experiment(experiment, ExperimentStatus.CANCELLED)
            experiment.finished_at = utcnow()
            experiment.decision_reason = f"cancelled by {agent.name} while queued"
            cancel_queued_runs(tx.session, experiment_id, experiment.finished_at)
            tx.emit(
                Finished(
                    experiment_id=experiment_id,
                    status=ExperimentStatus.CANCELLED,
                    reason=experiment.decision_reason,
                ),
            )
        elif experiment.status == ExperimentStatus.RUNNING:
            experiment.cancel_requested = True


def retry(ctx: AppContext, admin: Principal, experiment_id: int) -> None:
    """Queue an `infra_failed` or `cancelled` experiment again, at the back, with its attempts
    reset; 409 for any other, or one that has a result."""
    with ctx.transaction() as tx:
        experiment = tx.session.get(Experiment, experiment_id, with_for_update=True)
        if experiment is None:
            raise unknown_experiment(experiment_id)
        if experiment.status not in RETRYABLE_STATUSES:
            raise Problem(
                409,
                "not-retryable",
                f"experiment {experiment_id} is {experiment.status}; only infra_failed or cancelled "
                "experiments can be queued again",
            )
        if has_result(tx.session, experiment_id):
            raise Problem(409, "has-result", f"experiment {experiment_id} already has a result")
        why = f"queued again by {admin.name} (was {experiment.status})"
        queue_again(tx.session, experiment, utcnow())
        track = name_of(tx.session, experiment.track_id)
        tx.emit(Queued(experiment_id=experiment_id, attempts=0, why=why, track=track))
