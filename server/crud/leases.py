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
from typing import Any

from sqlalchemy import Row, Update, bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session

from server.context import AppContext, Tx
from server.core.problems import Problem
from server.crud.project import load_project
from server.crud.tokens import Principal
from server.models import (
    CANCELLED,
    EXPERIMENTS,
    INFRA_FAILED,
    LEASES,
    QUEUED,
    RUNNING,
    Experiment,
    Lease,
    ProgressSample,
    Worker,
    utcnow,
)
from server.schemas import ClaimOut, HeartbeatOut, ProgressEventIn

ACTIVE, EXPIRED, RELEASED, FINISHED = "active", "expired", "released", "finished"


def check_worker(ctx: AppContext, principal: Principal, worker_id: str) -> None:
    """404 unless `worker_id` was registered with the caller's token."""
    owner = ctx.presence.owner(worker_id)
    if owner is None:
        with ctx.db.read() as session:
            worker = session.get(Worker, worker_id)
        if worker is not None:
            ctx.presence.remember(worker_id, worker.token_id, worker.name)
            owner = worker.token_id
    if owner != principal.id:
        raise Problem(
            404, "unknown-worker", f"no worker {worker_id!r} registered with this token; register again"
        )


def _write_seen(session: Session, worker_id: str) -> None:
    session.execute(update(Worker).where(Worker.id == worker_id).values(last_seen_at=utcnow()))


def _touch(ctx: AppContext, session: Session, worker_id: str) -> None:
    """Note the worker as seen (written at most every few seconds, see server/presence.py)."""
    if ctx.presence.seen_write_due(worker_id):
        _write_seen(session, worker_id)


def _claim_statement(gated: bool) -> Update:
    """Take the first claimable queued experiment: one UPDATE ... RETURNING around a locked pick.

    The worker endpoints are what a fleet calls most, so their statements are plain Core, built
    once here and run on the transaction's connection: no ORM unit of work, no identity map.
    """
    pick = select(EXPERIMENTS.c.id).where(EXPERIMENTS.c.status == QUEUED)
    if gated:
        pick = pick.where(EXPERIMENTS.c.id == bindparam("gate"))
    pick = pick.order_by(EXPERIMENTS.c.queued_at, EXPERIMENTS.c.id).limit(1)
    pick = pick.with_for_update(skip_locked=True)
    return (
        update(EXPERIMENTS)
        .where(EXPERIMENTS.c.id == pick.scalar_subquery(), EXPERIMENTS.c.status == QUEUED)
        .values(
            status=RUNNING,
            attempts=EXPERIMENTS.c.attempts + 1,
            started_at=bindparam("now", type_=EXPERIMENTS.c.started_at.type),
        )
        .returning(
            EXPERIMENTS.c.id, EXPERIMENTS.c.attempts, EXPERIMENTS.c.commit_sha, EXPERIMENTS.c.description
        )
    )


_CLAIM = _claim_statement(gated=False)
_CLAIM_GATED = _claim_statement(gated=True)
_INSERT_LEASE = insert(LEASES)
_LOCK_LEASE = select(LEASES).where(LEASES.c.id == bindparam("lease_id")).with_for_update()
_UPDATE_LEASE = update(LEASES).where(LEASES.c.id == bindparam("lease_id"))
_INSERT_PROGRESS = insert(ProgressSample)


def _gate(ctx: AppContext, session: Session) -> int | None:
    """The one experiment that may be handed out now, or None when any queued one may.

    Until the best (the baseline) has a valid measurement, only it runs: nothing is compared
    with an unmeasured best. Once measured, it stays measured, so the check is skipped after.
    """
    if ctx.best_measured:
        return None
    project = load_project(session)
    if project.best_val_bpb is not None or project.best_experiment_id is None:
        ctx.best_measured = project.best_val_bpb is not None
        return None
    gate = session.get(Experiment, project.best_experiment_id)
    if gate is None or gate.status not in (QUEUED, RUNNING):
        return None  # the baseline ended without a valid result: the first valid result will do
    return gate.id


def claim(ctx: AppContext, principal: Principal, worker_id: str) -> ClaimOut | None:
    """Lease the next queued experiment to this worker, or None when nothing can run now."""
    check_worker(ctx, principal, worker_id)
    if ctx.db.sqlite:
        # SQLite has one writer for the whole database: look before taking its write lock, so
        # that idle long polls do not queue for it. PostgreSQL's claim below locks one row only.
        with ctx.db.read() as session:
            anything = session.scalar(select(Experiment.id).where(Experiment.status == QUEUED).limit(1))
        if anything is None:
            if ctx.presence.seen_write_due(worker_id):
                with ctx.transaction() as tx:
                    _write_seen(tx.session, worker_id)
            return None
    with ctx.transaction() as tx:
        _touch(ctx, tx.session, worker_id)
        now = utcnow()
        gate = _gate(ctx, tx.session)
        connection = tx.session.connection()
        if gate is None:
            picked = connection.execute(_CLAIM, {"now": now}).first()
        else:
            picked = connection.execute(_CLAIM_GATED, {"now": now, "gate": gate}).first()
        if picked is None:
            return None
        lease = {
            "id": str(uuid.uuid4()),
            "experiment_id": picked.id,
            "worker_id": worker_id,
            "attempt": picked.attempts,
            "state": ACTIVE,
            "claimed_at": now,
            "expires_at": now + timedelta(seconds=ctx.settings.lease_seconds),
        }
        connection.execute(_INSERT_LEASE, lease)
        tx.emit(
            "started", experiment_id=picked.id, attempt=picked.attempts, worker=ctx.presence.name(worker_id)
        )
    train_py = ctx.repo.train_py(picked.commit_sha)
    return ClaimOut(
        lease_id=lease["id"],
        experiment_id=picked.id,
        attempt=picked.attempts,
        description=picked.description,
        train_py=train_py.decode("utf-8"),
        train_py_sha256=hashlib.sha256(train_py).hexdigest(),
        lease_expires_at=lease["expires_at"],
    )


def locked_lease(ctx: AppContext, session: Session, principal: Principal, lease_id: str) -> Row[Any]:
    """The caller's lease row, row-locked (PostgreSQL), in any state; 404 when not the caller's."""
    lease = session.connection().execute(_LOCK_LEASE, {"lease_id": lease_id}).first()
    if lease is not None:
        owner = ctx.presence.owner(lease.worker_id)
        if owner is None:
            worker = session.get(Worker, lease.worker_id)
            if worker is not None:
                ctx.presence.remember(worker.id, worker.token_id, worker.name)
                owner = worker.token_id
        if owner == principal.id:
            return lease
    raise Problem(404, "unknown-lease", f"no lease {lease_id!r} held by this worker token")


def set_lease(session: Session, lease_id: str, **values: object) -> None:
    """Change the lease's columns named in `values` (the parameters make the SET clause)."""
    session.connection().execute(_UPDATE_LEASE, {"lease_id": lease_id, **values})


def require_held(ctx: AppContext, session: Session, lease: Row[Any]) -> None:
    """409 unless the lease is active and unexpired; notes the worker as seen."""
    if lease.state != ACTIVE:
        raise Problem(409, "lease-not-held", f"lease {lease.id} is no longer held: it was {lease.state}")
    if lease.expires_at <= utcnow():
        raise Problem(
            409,
            "lease-not-held",
            f"lease {lease.id} expired at {lease.expires_at.isoformat()}; the experiment goes back to the "
            "queue",
        )
    _touch(ctx, session, lease.worker_id)


def held_lease(ctx: AppContext, session: Session, principal: Principal, lease_id: str) -> Row[Any]:
    """The caller's active, unexpired lease (row-locked), else 404 (not yours) or 409 (not held)."""
    lease = locked_lease(ctx, session, principal, lease_id)
    require_held(ctx, session, lease)
    return lease


def heartbeat(ctx: AppContext, principal: Principal, lease_id: str) -> HeartbeatOut:
    with ctx.transaction() as tx:
        lease = held_lease(ctx, tx.session, principal, lease_id)
        expires_at = utcnow() + timedelta(seconds=ctx.settings.lease_seconds)
        set_lease(tx.session, lease.id, expires_at=expires_at)
        cancel = tx.session.scalar(
            select(Experiment.cancel_requested).where(Experiment.id == lease.experiment_id)
        )
        return HeartbeatOut(lease_expires_at=expires_at, cancel=bool(cancel))


def record_progress(
    ctx: AppContext, principal: Principal, lease_id: str, events: list[ProgressEventIn]
) -> None:
    """Store progress samples, keeping at most MAX_PROGRESS_EVENTS per experiment.

    Only the latest attempt's samples are kept. Past the bound, the sample whose neighbours are
    closest (in steps) is dropped, again and again: the stored curve keeps its first and last
    points and stays evenly spread over the whole run, however long it gets.
    """
    with ctx.transaction() as tx:
        lease = held_lease(ctx, tx.session, principal, lease_id)
        if not events:
            return
        # One executemany on the connection: through the ORM each sample cost about ten times as
        # much, and a fleet sends many (docs/benchmarks.md, "Fleet").
        tx.session.connection().execute(
            _INSERT_PROGRESS,
            [
                {
                    "experiment_id": lease.experiment_id,
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
        _thin_progress(tx.session, lease.experiment_id, lease.attempt, ctx.settings.max_progress_events)
        last = events[-1]
        tx.emit("progress", experiment_id=lease.experiment_id, attempt=lease.attempt, **last.model_dump())


def _thin_progress(session: Session, experiment_id: int, attempt: int, limit: int) -> None:
    session.execute(
        delete(ProgressSample).where(
            ProgressSample.experiment_id == experiment_id, ProgressSample.attempt < attempt
        )
    )
    mine = (ProgressSample.experiment_id == experiment_id) & (ProgressSample.attempt == attempt)
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


def release(ctx: AppContext, principal: Principal, lease_id: str, reason: str, count_attempt: bool) -> None:
    with ctx.transaction() as tx:
        lease = held_lease(ctx, tx.session, principal, lease_id)
        set_lease(tx.session, lease.id, state=RELEASED, ended_at=utcnow())
        experiment = tx.session.get(Experiment, lease.experiment_id, with_for_update=True)
        assert experiment is not None
        why = f"released by the worker: {reason}" if reason else "released by the worker"
        back_to_queue(tx, experiment, why, count_attempt, max_attempts=ctx.settings.max_attempts)


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
