"""Recording a worker's result for one run and deciding on it, exactly once per result_id.

One result, one pass through the layers: the result stored (server/crud/results.py), the run
counted and the judge's snapshot read (server/crud/evidence.py), the verdict (server/rules/judge.py,
pure), its effects (server/flows/decisions.py), the experiment's row written. A run presumed slowed
(judge.rerun, read before the run is counted) is stored and not counted: its verdict is to run
again.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from protocol.events import Finished
from protocol.result import INTEGRITY_CLASSES, RunResult
from protocol.schemas import ResultIn, ResultOutcome
from protocol.states import LeaseState, RunState
from server.context import AppContext
from server.core.problems import Problem
from server.crud import evidence, integrity, results
from server.crud.leases import set_lease
from server.crud.noise import RunStats
from server.crud.tokens import Principal
from server.crud.tracks import TrackState, current_best
from server.flows.decisions import settle
from server.flows.leases import locked_lease, require_held
from server.models import AnyRow, utcnow
from server.rules.judge import NEEDS_FRESH_BEST, Action, Verdict, judge, rerun
from server.rules.lifecycle import check_experiment_move, check_run_move


def record_result(ctx: AppContext, principal: Principal, lease_id: str, body: ResultIn) -> ResultOutcome:
    """Store the run's result, decide on its experiment and end the lease, in one transaction.

    The rows it reads are locked where they must be (the lease, then the experiment), and the
    experiment's new values (measurement and decision) are written with one UPDATE.
    """
    result_id = body.result_id.lower()
    with ctx.transaction() as tx:
        lease = locked_lease(ctx, tx.session, principal, lease_id)
        if lease.state == LeaseState.FINISHED:
            replay = results.already_recorded(tx.session, lease_id, result_id)
            if replay is not None:
                return replay
        require_held(ctx, tx.session, lease)
        experiment = results.locked_experiment(tx.session, lease.experiment_id)
        run = results.run_row(tx.session, lease.run_id)
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
        fields = measured.model_dump(mode="json")
        fields["seed"] = run.seed if measured.seed is None else measured.seed
        extra = {key: fields.pop(key) for key in list(fields) if key not in results.RESULT_COLUMNS}
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
        results.insert_result(tx.session, row)
        tx.emit(
            Finished(
                experiment_id=experiment.id,
                run=run.number,
                result_status=measured.status,
                val_bpb=measured.val_bpb,
            ),
        )
        track = current_best(tx.session, experiment.track_id)
        half_life_h = ctx.settings.offsets_half_life_h
        slowdown = evidence.slowdown(
            tx.session, ctx.settings.rule, track, experiment, run, measured, lease.worker_id, now, half_life_h
        )
        verdict = rerun(slowdown, ctx.settings.rule) if slowdown is not None else None
        state = RunState.FINISHED if verdict is None else RunState.SLOWED
        check_run_move(run.status, state)
        results.finish_run(tx.session, run.id, now, state)
        after = RunStats(experiment.valid_runs, experiment.val_bpb, experiment.val_bpb_m2)
        if verdict is None:
            after = evidence.count_run(tx.session, track, experiment, run, measured, half_life_h)
            verdict, track = _judged(ctx, tx.session, track, experiment, run, measured, after)
        changes: dict[str, object] = {"platform": measured.device}
        changes |= {"valid_runs": after.n, "val_bpb": after.mean, "val_bpb_m2": after.m2}
        changes |= settle(ctx, tx, track, experiment, verdict, run.kind)
        if measured.error_class in INTEGRITY_CLASSES and experiment.agent_id is not None:
            event = integrity.record_event(
                tx.session.connection(),
                experiment.agent_id,
                experiment.id,
                result_id,
                measured.error_class,
                now,
            )
            if "decision_reason" in changes:
                changes["decision_reason"] = (
                    f"{changes['decision_reason']}; integrity event {event}: this agent's queued "
                    "experiments are held until an admin clears it"
                )
        if "status" in changes:
            check_experiment_move(experiment.status, str(changes["status"]))
        results.update_experiment(tx.session, experiment.id, changes)
        return ResultOutcome(
            experiment_id=experiment.id,
            run=run.number,
            decision=changes.get("decision", experiment.decision),
            status=changes.get("status", experiment.status),
            reason=_reason(run.number, changes, verdict),
        )


def _judged(
    ctx: AppContext,
    session: Session,
    track: TrackState,
    experiment: AnyRow,
    run: AnyRow,
    measured: RunResult,
    after: RunStats,
) -> tuple[Verdict, TrackState]:
    """The judge's verdict on the counted run, and the track it was reached on: a verdict that moves
    the best or builds on it is reached again on the locked, fresh row."""
    locked, half_life_h = False, ctx.settings.offsets_half_life_h
    while True:
        snapshot = evidence.snapshot(
            session, ctx.settings.rule, track, experiment, run, measured, after, half_life_h
        )
        verdict = judge(snapshot)
        if locked or verdict.action not in NEEDS_FRESH_BEST:
            return verdict, track
        track, locked = current_best(session, experiment.track_id, lock=True), True


def _reason(number: int, changes: dict[str, object], verdict: Verdict) -> str:
    """What this run's result decided, in words: the decision's reason, or, for a run of an
    experiment decided before it (a repeat of the best, a measuring run of the baseline), that it
    decided nothing: the old reason would read as if this run had decided it again. A run presumed
    slowed says so."""
    if "decision_reason" in changes:
        return str(changes["decision_reason"] or "")
    if verdict.action is Action.RERUN:
        return verdict.reason
    runs = changes["valid_runs"]
    return f"run {number} of an experiment decided before it: {runs} valid runs now, nothing to decide"
