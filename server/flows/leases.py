"""The worker side of the queue: claim a run under a lease, heartbeat, progress, release, expiry.

Each is one transaction over the rows of server/crud/leases.py. A claim hands out runs of the
tracks the worker serves (server/flows/workers.py, `serving`) in the queue's order
(crud.leases.pick_run), except, per track, while its best is not measured yet (`gates`), and
when the worker is due a run of the track's best (`calibration`); a
first run whose base is no longer its track's best is carried over onto that best first
(server.flows.decisions.reapply_before_running), then claimed again. A run that ends without a result
(released, or its lease expired) is queued again or ended (`back_to_queue`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from protocol.events import Finished, Progress, Queued, Started
from protocol.schemas import ClaimOut, HeartbeatOut, ProgressEventIn
from protocol.states import ExperimentStatus, LeaseState, RunKind, RunState
from server.context import AppContext
from server.core.problems import Problem
from server.crud import leases
from server.crud.results import locked_experiment
from server.crud.runs import cancel_queued_runs, queue_runs
from server.crud.tokens import Principal
from server.crud.tracks import current_best, name_of
from server.flows.decisions import calibration_due, reapply_before_running
from server.flows.workers import serving
from server.models import AnyRow, Experiment, Run, utcnow
from server.rules.gate import gate_for
from server.rules.lifecycle import UNDECIDED, move_experiment, move_run
from server.transaction import Transaction


def owner_of(ctx: AppContext, session: Session, worker_id: str) -> int | None:
    """The id of the token that registered `worker_id` (remembered in ctx.presence), or None."""
    owner = ctx.presence.owner(worker_id)
    if owner is None:
        worker = leases.worker_row(session, worker_id)
        if worker is not None:
            ctx.presence.remember(worker_id, worker.token_id, worker.name)
            owner = worker.token_id
    return owner


def check_worker(ctx: AppContext, principal: Principal, worker_id: str) -> None:
    """404 unless `worker_id` was registered with the caller's token."""
    owner = ctx.presence.owner(worker_id)
    if owner is None:
        with ctx.db.read() as session:
            owner = owner_of(ctx, session, worker_id)
    if owner != principal.id:
        raise Problem(
            404, "unknown-worker", f"no worker {worker_id!r} registered with this token; register again"
        )


def touch(ctx: AppContext, session: Session, worker_id: str) -> None:
    """Note the worker as seen (written at most every few seconds, see server/presence.py)."""
    if ctx.presence.seen_write_due(worker_id):
        leases.write_seen(session, worker_id)


def gates(ctx: AppContext, session: Session, tracks: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Of these tracks, those any of whose queued runs may be handed out now, and the experiments
    (unmeasured bests) whose runs alone may be of the others (server/rules/gate.py). Once a track's best
    is measured its gate stays open, so the check is skipped after."""
    settings = ctx.settings
    open_, only = [], []
    for track in tracks:
        if track not in ctx.gate_open:
            best = leases.best_measurement(session, track)
            verdict = gate_for(best, settings.decision_rule, settings.noise_runs)
            if verdict.measured:
                ctx.gate_open.add(track)
            elif verdict.only is not None:
                only.append(verdict.only)
                continue
        open_.append(track)
    return open_, only


def calibration(
    ctx: AppContext, session: Session, worker_id: str, tracks: Sequence[int], now: datetime
) -> AnyRow | None:
    """A run of a track's best for this worker, now running, when one is due
    (decisions.calibration_due) on a track with work queued: one of the best's queued runs, else a
    repeat queued for it. None when none is due."""
    for track_id in tracks:
        # Idle long polls wake here with nothing queued: that one query first, then the runs made.
        if not leases.anything_queued(session, [track_id]):
            continue
        made, others = leases.runs_made(session, worker_id, track_id)
        if not calibration_due(ctx, made, others):
            continue
        best = current_best(session, track_id)
        if best.best_experiment_id is None:
            continue
        picked = leases.pick_run(session, now, (), (best.best_experiment_id,))
        if picked is None:
            # Concurrent claims can all find no queued run of the best: the first to lock its row
            # queues one (the next number), the others then see it committed and queue after it.
            experiment = locked_experiment(session, best.best_experiment_id)
            queue_runs(session, experiment.id, track_id, RunKind.REPEAT, experiment.queued_at)
            picked = leases.pick_run(session, now, (), (experiment.id,))
        return picked
    return None


def claim(ctx: AppContext, principal: Principal, worker_id: str) -> ClaimOut | None:
    """Lease the next queued run to this worker, or None when nothing can run now."""
    check_worker(ctx, principal, worker_id)
    tracks = serving(ctx, worker_id).ids
    if ctx.db.sqlite:
        # SQLite has one writer for the whole database: look before taking its write lock, so
        # that idle long polls do not queue for it. PostgreSQL's claim below locks one row only.
        with ctx.db.read() as session:
            anything = leases.anything_queued(session, tracks)
        if not anything:
            if ctx.presence.seen_write_due(worker_id):
                with ctx.transaction() as tx:
                    leases.write_seen(tx.session, worker_id)
            return None
    while True:
        with ctx.transaction() as tx:
            touch(ctx, tx.session, worker_id)
            now = utcnow()
            open_, only = gates(ctx, tx.session, tracks)
            picked = calibration(ctx, tx.session, worker_id, open_, now) or leases.pick_run(
                tx.session, now, open_, only
            )
            if picked is None:
                return None
            experiment = leases.start_experiment(tx.session, picked.experiment_id, now)
            if (
                picked.number == 1
                and experiment.base_commit is not None
                and experiment.base_commit != leases.best_commit(tx.session, experiment.track_id)
                and reapply_before_running(ctx, tx, experiment.track_id, picked.experiment_id, picked.id)
            ):
                continue  # its change went onto the current best: claim again
            lease = {
                "id": str(uuid.uuid4()),
                "experiment_id": picked.experiment_id,
                "run_id": picked.id,
                "worker_id": worker_id,
                "attempt": picked.attempts,
                "state": LeaseState.ACTIVE,
                "claimed_at": now,
                "expires_at": now + timedelta(seconds=ctx.settings.lease_seconds),
            }
            leases.insert_lease(tx.session, lease)
            tx.emit(
                Started(
                    experiment_id=picked.experiment_id,
                    run=picked.number,
                    attempt=picked.attempts,
                    worker=ctx.presence.name(worker_id),
                ),
            )
        break
    train_py = ctx.repo.train_py(experiment.commit_sha)
    return ClaimOut(
        lease_id=lease["id"],
        experiment_id=picked.experiment_id,
        run=picked.number,
        seed=picked.seed,
        attempt=picked.attempts,
        description=experiment.description,
        train_py=train_py.decode("utf-8"),
        train_py_sha256=hashlib.sha256(train_py).hexdigest(),
        lease_expires_at=lease["expires_at"],
    )


def locked_lease(ctx: AppContext, session: Session, principal: Principal, lease_id: str) -> AnyRow:
    """The caller's lease row, row-locked (PostgreSQL), in any state; 404 when not the caller's."""
    lease = leases.lease_row(session, lease_id)
    if lease is not None and owner_of(ctx, session, lease.worker_id) == principal.id:
        return lease
    raise Problem(404, "unknown-lease", f"no lease {lease_id!r} held by this worker token")


def require_held(ctx: AppContext, session: Session, lease: AnyRow) -> None:
    """409 unless the lease is active and unexpired; notes the worker as seen."""
    if lease.state != LeaseState.ACTIVE:
        raise Problem(409, "lease-not-held", f"lease {lease.id} is no longer held: it was {lease.state}")
    if lease.expires_at <= utcnow():
        raise Problem(
            409,
            "lease-not-held",
            f"lease {lease.id} expired at {lease.expires_at.isoformat()}; the experiment goes back to the "
            "queue",
        )
    touch(ctx, session, lease.worker_id)


def held_lease(ctx: AppContext, session: Session, principal: Principal, lease_id: str) -> AnyRow:
    """The caller's active, unexpired lease (row-locked), else 404 (not yours) or 409 (not held)."""
    lease = locked_lease(ctx, session, principal, lease_id)
    require_held(ctx, session, lease)
    return lease


def heartbeat(ctx: AppContext, principal: Principal, lease_id: str) -> HeartbeatOut:
    with ctx.transaction() as tx:
        lease = held_lease(ctx, tx.session, principal, lease_id)
        expires_at = utcnow() + timedelta(seconds=ctx.settings.lease_seconds)
        leases.set_lease(tx.session, lease.id, expires_at=expires_at)
        return HeartbeatOut(
            lease_expires_at=expires_at, cancel=leases.cancel_requested(tx.session, lease.experiment_id)
        )


def record_progress(
    ctx: AppContext, principal: Principal, lease_id: str, events: list[ProgressEventIn]
) -> None:
    """Store progress samples (at most MAX_PROGRESS_EVENTS per run, crud.leases.add_progress) and
    announce the latest."""
    with ctx.transaction() as tx:
        lease = held_lease(ctx, tx.session, principal, lease_id)
        if not events:
            return
        leases.add_progress(tx.session, lease, events, ctx.settings.max_progress_events)
        last = events[-1]
        tx.emit(
            Progress(
                experiment_id=lease.experiment_id,
                run=leases.run_number(tx.session, lease.run_id),
                attempt=lease.attempt,
                **last.model_dump(),
            ),
        )


def back_to_queue(
    tx: Transaction, experiment: Experiment, run: Run, why: str, count_attempt: bool, max_attempts: int
) -> None:
    """A run ended without a result: queue it again, or end it (cancelled, or too many attempts).

    An undecided experiment follows its run; a decided one (the best, whose repeat this was) keeps
    its status whatever happens to the run.
    """
    now = utcnow()
    if not count_attempt:
        run.attempts -= 1
    undecided = experiment.status in UNDECIDED
    if experiment.cancel_requested and undecided:
        move_run(run, RunState.CANCELLED)
        run.finished_at = now
        move_experiment(experiment, ExperimentStatus.CANCELLED)
        experiment.decision_reason = f"cancelled while running ({why})"
    elif run.attempts >= max_attempts:
        move_run(run, RunState.INFRA_FAILED)
        run.finished_at = now
        if not undecided:
            tx.emit(
                Finished(
                    experiment_id=experiment.id, run=run.number, status=RunState.INFRA_FAILED, reason=why
                ),
            )
            return
        move_experiment(experiment, ExperimentStatus.INFRA_FAILED)
        of_run = f" of run {run.number}" if run.number > 1 else ""
        experiment.decision_reason = (
            f"{why}; attempt {run.attempts} of {max_attempts}{of_run}: ended as an infrastructure failure"
        )
    else:
        move_run(run, RunState.QUEUED)
        run.started_at = None  # keeps its queued_at: its place in the queue
        if undecided:
            move_experiment(experiment, ExperimentStatus.QUEUED)
            experiment.started_at = None
        track = name_of(tx.session, experiment.track_id)
        tx.emit(
            Queued(experiment_id=experiment.id, run=run.number, attempts=run.attempts, why=why, track=track),
        )
        return
    cancel_queued_runs(tx.session, experiment.id, now)
    experiment.finished_at = now
    tx.emit(
        Finished(experiment_id=experiment.id, status=experiment.status, reason=experiment.decision_reason),
    )


def release(ctx: AppContext, principal: Principal, lease_id: str, reason: str, count_attempt: bool) -> None:
    with ctx.transaction() as tx:
        lease = held_lease(ctx, tx.session, principal, lease_id)
        leases.set_lease(tx.session, lease.id, state=LeaseState.RELEASED, ended_at=utcnow())
        experiment, run = leases.locked_run(tx.session, lease.experiment_id, lease.run_id)
        why = f"released by the worker: {reason}" if reason else "released by the worker"
        back_to_queue(tx, experiment, run, why, count_attempt, max_attempts=ctx.settings.max_attempts)


def expire_leases(ctx: AppContext) -> int:
    """Requeue the runs of expired leases (or end them after MAX_ATTEMPTS); return how many."""
    now = utcnow()
    with ctx.db.read() as session:
        if not leases.any_expired(session, now):
            return 0
    with ctx.transaction() as tx:
        expired = leases.expired_leases(tx.session, now)
        for lease in expired:
            lease.state = LeaseState.EXPIRED
            lease.ended_at = now
            experiment, run = leases.locked_run(tx.session, lease.experiment_id, lease.run_id)
            deadline = lease.expires_at.isoformat()
            why = f"lease of attempt {lease.attempt} expired (no heartbeat before {deadline})"
            back_to_queue(
                tx, experiment, run, why, count_attempt=True, max_attempts=ctx.settings.max_attempts
            )
        return len(expired)
