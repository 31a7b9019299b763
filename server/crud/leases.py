"""The worker side of the queue: claim under a lease, heartbeat, progress, release, expiry.

Claims are atomic: the queued row is picked with `SELECT ... FOR UPDATE SKIP LOCKED` on
PostgreSQL (concurrent claims skip each other's rows instead of waiting) and inside a
`BEGIN IMMEDIATE` transaction on SQLite (one writer at a time), so each experiment goes to
exactly one worker. Order is FIFO by `queued_at`; an experiment requeued after a lost lease
keeps its original `queued_at`, so it runs before everything submitted after it.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from server.context import AppContext, Tx
from server.core.problems import Problem
from server.crud.project import load_project
from server.crud.tokens import Principal
from server.models import (
    CANCELLED,
    INFRA_FAILED,
    QUEUED,
    RUNNING,
    Experiment,
    Lease,
    ProgressSample,
    Project,
    Worker,
    utcnow,
)
from server.schemas import ClaimOut, HeartbeatOut, ProgressEventIn

ACTIVE, EXPIRED, RELEASED, FINISHED = "active", "expired", "released", "finished"


def _owned_worker(session: Session, principal: Principal, worker_id: str) -> Worker:
    worker = session.get(Worker, worker_id)
    if worker is None or worker.token_id != principal.id:
        raise Problem(
            404, "unknown-worker", f"no worker {worker_id!r} registered with this token; register again"
        )
    return worker


def _next_queued(session: Session, project: Project) -> Experiment | None:
    statement = (
        select(Experiment)
        .where(Experiment.status == QUEUED)
        .order_by(Experiment.queued_at, Experiment.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    if project.best_val_bpb is None and project.best_experiment_id is not None:
        # The best (the baseline) is not measured yet: measure it before anything is compared with it.
        gate = session.get(Experiment, project.best_experiment_id)
        if gate is not None and gate.status == RUNNING:
            return None
        if gate is not None and gate.status == QUEUED:
            statement = statement.where(Experiment.id == gate.id)
    return session.scalars(statement).first()


def claim(ctx: AppContext, principal: Principal, worker_id: str) -> ClaimOut | None:
    """Lease the next queued experiment to this worker, or None when nothing can run now."""
    with ctx.db.read() as session:
        worker = _owned_worker(session, principal, worker_id)
        anything = session.scalar(select(Experiment.id).where(Experiment.status == QUEUED).limit(1))
        fresh = utcnow() - worker.last_seen_at < timedelta(seconds=ctx.settings.lease_seconds / 3)
    if anything is None and fresh:
        return None
    with ctx.transaction() as tx:
        worker = _owned_worker(tx.session, principal, worker_id)
        now = utcnow()
        worker.last_seen_at = now
        experiment = _next_queued(tx.session, load_project(tx.session)) if anything is not None else None
        if experiment is None:
            return None
        experiment.status = RUNNING
        experiment.attempts += 1
        experiment.started_at = now
        lease = Lease(
            id=str(uuid.uuid4()),
            experiment_id=experiment.id,
            worker_id=worker.id,
            attempt=experiment.attempts,
            state=ACTIVE,
            claimed_at=now,
            expires_at=now + timedelta(seconds=ctx.settings.lease_seconds),
        )
        tx.session.add(lease)
        tx.emit("started", experiment_id=experiment.id, attempt=lease.attempt, worker=worker.name)
        commit, description = experiment.commit_sha, experiment.description
    train_py = ctx.repo.train_py(commit)
    return ClaimOut(
        lease_id=lease.id,
        experiment_id=lease.experiment_id,
        attempt=lease.attempt,
        description=description,
        train_py=train_py.decode("utf-8"),
        train_py_sha256=hashlib.sha256(train_py).hexdigest(),
        lease_expires_at=lease.expires_at,
    )


def held_lease(session: Session, principal: Principal, lease_id: str) -> Lease:
    """The caller's active, unexpired lease (row-locked), else 404 (not yours) or 409 (not held)."""
    lease = session.scalars(select(Lease).where(Lease.id == lease_id).with_for_update()).first()
    worker = session.get(Worker, lease.worker_id) if lease is not None else None
    if lease is None or worker is None or worker.token_id != principal.id:
        raise Problem(404, "unknown-lease", f"no lease {lease_id!r} held by this worker token")
    if lease.state != ACTIVE:
        raise Problem(409, "lease-not-held", f"lease {lease_id} is no longer held: it was {lease.state}")
    if lease.expires_at <= utcnow():
        raise Problem(
            409,
            "lease-not-held",
            f"lease {lease_id} expired at {lease.expires_at.isoformat()}; the experiment goes back to the "
            "queue",
        )
    worker.last_seen_at = utcnow()
    return lease


def heartbeat(ctx: AppContext, principal: Principal, lease_id: str) -> HeartbeatOut:
    with ctx.transaction() as tx:
        lease = held_lease(tx.session, principal, lease_id)
        lease.expires_at = utcnow() + timedelta(seconds=ctx.settings.lease_seconds)
        experiment = tx.session.get(Experiment, lease.experiment_id)
        assert experiment is not None
        return HeartbeatOut(lease_expires_at=lease.expires_at, cancel=experiment.cancel_requested)


def record_progress(
    ctx: AppContext, principal: Principal, lease_id: str, events: list[ProgressEventIn]
) -> None:
    """Store progress samples, keeping at most MAX_PROGRESS_EVENTS per experiment.

    When the bound is passed, every other stored sample is dropped (the newest is kept), so the
    stored curve always covers the whole run at a coarser step instead of only its start.
    """
    with ctx.transaction() as tx:
        lease = held_lease(tx.session, principal, lease_id)
        if not events:
            return
        tx.session.add_all(
            ProgressSample(
                experiment_id=lease.experiment_id,
                attempt=lease.attempt,
                step=e.step,
                loss=e.loss,
                tokens_per_s=e.tokens_per_s,
                fraction=e.fraction,
                phase=e.phase,
                elapsed_s=e.elapsed_s,
            )
            for e in events
        )
        tx.session.flush()
        _thin_progress(tx.session, lease.experiment_id, ctx.settings.max_progress_events)
        last = events[-1]
        tx.emit("progress", experiment_id=lease.experiment_id, attempt=lease.attempt, **last.model_dump())


def _thin_progress(session: Session, experiment_id: int, limit: int) -> None:
    count = session.scalar(select(func.count()).where(ProgressSample.experiment_id == experiment_id)) or 0
    if count <= limit:
        return
    ids = list(
        session.scalars(
            select(ProgressSample.id)
            .where(ProgressSample.experiment_id == experiment_id)
            .order_by(ProgressSample.id)
        )
    )
    while len(ids) > limit:
        drop = set(ids[1:-1:2])
        session.execute(delete(ProgressSample).where(ProgressSample.id.in_(drop)))
        ids = [i for i in ids if i not in drop]


def progress_of(ctx: AppContext, experiment_id: int) -> list[ProgressSample]:
    """The stored samples of the experiment's latest attempt, oldest first."""
    with ctx.db.read() as session:
        attempt = session.scalar(
            select(func.max(ProgressSample.attempt)).where(ProgressSample.experiment_id == experiment_id)
        )
        if attempt is None:
            return []
        statement = (
            select(ProgressSample)
            .where(ProgressSample.experiment_id == experiment_id, ProgressSample.attempt == attempt)
            .order_by(ProgressSample.id)
        )
        return list(session.scalars(statement))


def back_to_queue(tx: Tx, experiment: Experiment, why: str, count_attempt: bool, max_attempts: int) -> None:
    """A run ended without a result: queue it again, or end it (cancelled, or too many attempts)."""
    now = utcnow()
    if not count_attempt:
        experiment.attempts -= 1
    if experiment.cancel_requested:
        experiment.status = CANCELLED
        experiment.decision_reason = f"cancelled while running ({why})"
    elif experiment.attempts >= max_attempts:
        experiment.status = INFRA_FAILED
        experiment.decision_reason = (
            f"{why}; attempt {experiment.attempts} of {max_attempts}: ended as an infrastructure failure"
        )
    else:
        experiment.status = QUEUED  # keeps its queued_at: back to its original place in the queue
        experiment.started_at = None
        tx.emit("queued", experiment_id=experiment.id, attempts=experiment.attempts, why=why)
        return
    experiment.finished_at = now
    tx.emit(
        "finished", experiment_id=experiment.id, status=experiment.status, reason=experiment.decision_reason
    )


def release(ctx: AppContext, principal: Principal, lease_id: str, reason: str) -> None:
    with ctx.transaction() as tx:
        lease = held_lease(tx.session, principal, lease_id)
        lease.state = RELEASED
        lease.ended_at = utcnow()
        experiment = tx.session.get(Experiment, lease.experiment_id, with_for_update=True)
        assert experiment is not None
        why = f"released by the worker: {reason}" if reason else "released by the worker"
        back_to_queue(tx, experiment, why, count_attempt=False, max_attempts=ctx.settings.max_attempts)


def expire_leases(ctx: AppContext) -> int:
    """Requeue the experiments of expired leases (or end them after MAX_ATTEMPTS); return how many."""
    now = utcnow()
    with ctx.db.read() as session:
        due = session.scalar(select(Lease.id).where(Lease.state == ACTIVE, Lease.expires_at <= now).limit(1))
    if due is None:
        return 0
    with ctx.transaction() as tx:
        leases = list(
            tx.session.scalars(
                select(Lease)
                .where(Lease.state == ACTIVE, Lease.expires_at <= now)
                .with_for_update(skip_locked=True)
            )
        )
        for lease in leases:
            lease.state = EXPIRED
            lease.ended_at = now
            experiment = tx.session.get(Experiment, lease.experiment_id, with_for_update=True)
            assert experiment is not None
            deadline = lease.expires_at.isoformat()
            why = f"lease of attempt {lease.attempt} expired (no heartbeat before {deadline})"
            back_to_queue(tx, experiment, why, count_attempt=True, max_attempts=ctx.settings.max_attempts)
        return len(leases)
