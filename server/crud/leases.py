"""The worker side of the queue: claim a run under a lease, heartbeat, progress, release, expiry.

Workers claim runs: an experiment's first run, a confirmation run, or a repeat of the best. Claims
are atomic: the queued run is picked with `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL
(concurrent claims skip each other's rows instead of waiting) and inside a `BEGIN IMMEDIATE`
transaction on SQLite (one writer at a time), so each run goes to exactly one worker. Order is
FIFO by `queued_at`, which a run takes from its experiment; a run requeued after a lost lease
keeps it too, so it runs before everything submitted after its experiment.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import Row, Update, bindparam, case, delete, func, insert, select, update
from sqlalchemy.orm import Session

from client.events import EventType, Finished, Progress, Queued, Started
from client.schemas import ClaimOut, HeartbeatOut, ProgressEventIn
from client.states import RETRYABLE_STATUSES, ExperimentStatus, LeaseState, Rule, RunState
from server.context import AppContext, Tx
from server.core.problems import Problem
from server.crud import integrity
from server.crud import noise as noise_crud
from server.crud.project import load_project
from server.crud.runs import cancel_queued_runs, live_runs
from server.crud.tokens import Principal
from server.decisions import reapply_before_running
from server.lifecycle import UNDECIDED, experiment_sources, move_experiment, move_run
from server.models import (
    EXPERIMENTS,
    LEASES,
    PROJECT,
    RUNS,
    Experiment,
    Lease,
    ProgressSample,
    Run,
    Worker,
    utcnow,
)


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
    """Take the first claimable queued run: one UPDATE ... RETURNING around a locked pick. Runs of
    experiments held for their agent's integrity event (server/crud/integrity.py) are skipped.

    The worker endpoints are what a fleet calls most, so their statements are plain Core, built
    once here and run on the transaction's connection: no ORM unit of work, no identity map.
    """
    pick = select(RUNS.c.id).where(
        RUNS.c.status == RunState.QUEUED, RUNS.c.experiment_id.not_in(integrity.HELD_EXPERIMENTS)
    )
    if gated:
        pick = pick.where(RUNS.c.experiment_id == bindparam("gate"))
    pick = pick.order_by(RUNS.c.queued_at, RUNS.c.id).limit(1)
    pick = pick.with_for_update(skip_locked=True)
    return (
        update(RUNS)
        .where(RUNS.c.id == pick.scalar_subquery(), RUNS.c.status == RunState.QUEUED)
        .values(
            status=RunState.RUNNING,
            attempts=RUNS.c.attempts + 1,
            started_at=bindparam("now", type_=RUNS.c.started_at.type),
        )
        .returning(RUNS.c.id, RUNS.c.experiment_id, RUNS.c.number, RUNS.c.seed, RUNS.c.attempts)
    )


_CLAIM = _claim_statement(gated=False)
_CLAIM_GATED = _claim_statement(gated=True)
# The claimed run's experiment: running, unless already decided (a repeat of the best).
_MAY_START = EXPERIMENTS.c.status.in_(experiment_sources(ExperimentStatus.RUNNING))
_START_EXPERIMENT = (
    update(EXPERIMENTS)
    .where(EXPERIMENTS.c.id == bindparam("experiment_id"))
    .values(
        status=case(
            (
                _MAY_START,
                ExperimentStatus.RUNNING,
            ),
            else_=EXPERIMENTS.c.status,
        ),
        started_at=case(
            (
                _MAY_START,
                bindparam("now", type_=EXPERIMENTS.c.started_at.type),
            ),
            else_=EXPERIMENTS.c.started_at,
        ),
    )
    .returning(EXPERIMENTS.c.commit_sha, EXPERIMENTS.c.description, EXPERIMENTS.c.base_commit)
)
_BEST_COMMIT = select(PROJECT.c.best_commit).where(PROJECT.c.id == 1)
_INSERT_LEASE = insert(LEASES)
_LOCK_LEASE = select(LEASES).where(LEASES.c.id == bindparam("lease_id")).with_for_update()
_UPDATE_LEASE = update(LEASES).where(LEASES.c.id == bindparam("lease_id"))
_INSERT_PROGRESS = insert(ProgressSample)


def _gate(ctx: AppContext, session: Session) -> int | None:
    """The one experiment whose runs may be handed out now, or None when any queued run may.

    Nothing is compared with a best that is not measured yet: until the best has a valid run
    (greedy), or until the noise estimate rests on NOISE_RUNS runs of the best (noise-aware),
    only the best's runs go out while it has any queued or running, and nothing at all while an
    unmeasured best waits to be queued again after its runs lost their workers. Once open, the gate stays
    open (a measurement is never lost), so the check is skipped after.
    """
    if ctx.gate_open:
        return None
    project = load_project(session)
    best_id = project.best_experiment_id
    if best_id is None:
        return None
    best = session.get(Experiment, best_id)
    assert best is not None
    if ctx.settings.decision_rule == Rule.NOISE_AWARE:
        estimate = noise_crud.noise(session, project.platform, project.harness_id)
        measured = estimate is not None and estimate.df >= ctx.settings.noise_runs - 1
    else:
        measured = best.valid_runs > 0
    if measured:
        ctx.gate_open = True
        return None
    if live_runs(session, best_id) == 0 and (best.valid_runs > 0 or best.status not in RETRYABLE_STATUSES):
        # Its runs ended without the measurement: a best with valid runs is compared on those; a
        # best that crashed by its own fault cannot be measured, and the next valid result will
        # do. One whose runs lost their workers keeps the gate shut: nothing is compared with it
        # until it is queued again (at the next server start, `init`, or an admin's retry).
        return None
    return best_id


def claim(ctx: AppContext, principal: Principal, worker_id: str) -> ClaimOut | None:
    """Lease the next queued run to this worker, or None when nothing can run now."""
    check_worker(ctx, principal, worker_id)
    if ctx.db.sqlite:
        # SQLite has one writer for the whole database: look before taking its write lock, so
        # that idle long polls do not queue for it. PostgreSQL's claim below locks one row only.
        with ctx.db.read() as session:
            anything = session.scalar(select(Run.id).where(Run.status == RunState.QUEUED).limit(1))
        if anything is None:
            if ctx.presence.seen_write_due(worker_id):
                with ctx.transaction() as tx:
                    _write_seen(tx.session, worker_id)
            return None
    while True:
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
            experiment = connection.execute(
                _START_EXPERIMENT, {"experiment_id": picked.experiment_id, "now": now}
            ).one()
            if (
                picked.number == 1
                and experiment.base_commit is not None
                and experiment.base_commit != connection.execute(_BEST_COMMIT).scalar()
                and reapply_before_running(ctx, tx, picked.experiment_id, picked.id)
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
            connection.execute(_INSERT_LEASE, lease)
            tx.emit(
                EventType.STARTED,
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
    if lease.state != LeaseState.ACTIVE:
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
    """Store progress samples, keeping at most MAX_PROGRESS_EVENTS per run.

    Only the latest attempt's samples of a run are kept. Past the bound, the sample whose
    neighbours are closest (in steps) is dropped, again and again: the stored curve keeps its
    first and last points and stays evenly spread over the whole run, however long it gets.
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
                    "run_id": lease.run_id,
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
        _thin_progress(
            tx.session, lease.experiment_id, lease.run_id, lease.attempt, ctx.settings.max_progress_events
        )
        number = tx.session.scalar(select(Run.number).where(Run.id == lease.run_id))
        last = events[-1]
        tx.emit(
            EventType.PROGRESS,
            Progress(
                experiment_id=lease.experiment_id, run=number, attempt=lease.attempt, **last.model_dump()
            ),
        )


def _thin_progress(session: Session, experiment_id: int, run_id: int, attempt: int, limit: int) -> None:
    session.execute(
        delete(ProgressSample).where(
            ProgressSample.experiment_id == experiment_id,
            ProgressSample.run_id == run_id,
            ProgressSample.attempt < attempt,
        )
    )
    mine = (
        (ProgressSample.experiment_id == experiment_id)
        & (ProgressSample.run_id == run_id)
        & (ProgressSample.attempt == attempt)
    )
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


def progress_of(
    ctx: AppContext, experiment_id: int, run: int | None = None
) -> tuple[int | None, list[ProgressSample]]:
    """The run's (default: the latest run with samples) number and the stored samples of its latest
    attempt, oldest first."""
    with ctx.db.read() as session:
        runs = select(Run.id, Run.number).where(Run.experiment_id == experiment_id)
        if run is not None:
            runs = runs.where(Run.number == run)
        else:
            runs = runs.where(
                Run.id.in_(select(ProgressSample.run_id).where(ProgressSample.experiment_id == experiment_id))
            )
        chosen = session.execute(runs.order_by(Run.number.desc()).limit(1)).first()
        if chosen is None:
            return run, []
        in_run = (ProgressSample.experiment_id == experiment_id) & (ProgressSample.run_id == chosen.id)
        attempt = session.scalar(select(func.max(ProgressSample.attempt)).where(in_run))
        if attempt is None:
            return chosen.number, []
        statement = (
            select(ProgressSample)
            .where(in_run, ProgressSample.attempt == attempt)
            .order_by(ProgressSample.id)
        )
        return chosen.number, list(session.scalars(statement))


def back_to_queue(
    tx: Tx, experiment: Experiment, run: Run, why: str, count_attempt: bool, max_attempts: int
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
                EventType.FINISHED,
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
        tx.emit(
            EventType.QUEUED,
            Queued(experiment_id=experiment.id, run=run.number, attempts=run.attempts, why=why),
        )
        return
    cancel_queued_runs(tx.session, experiment.id, now)
    experiment.finished_at = now
    tx.emit(
        EventType.FINISHED,
        Finished(experiment_id=experiment.id, status=experiment.status, reason=experiment.decision_reason),
    )


def release(ctx: AppContext, principal: Principal, lease_id: str, reason: str, count_attempt: bool) -> None:
    with ctx.transaction() as tx:
        lease = held_lease(ctx, tx.session, principal, lease_id)
        set_lease(tx.session, lease.id, state=LeaseState.RELEASED, ended_at=utcnow())
        experiment = tx.session.get(Experiment, lease.experiment_id, with_for_update=True)
        run = tx.session.get(Run, lease.run_id, with_for_update=True)
        assert experiment is not None and run is not None
        why = f"released by the worker: {reason}" if reason else "released by the worker"
        back_to_queue(tx, experiment, run, why, count_attempt, max_attempts=ctx.settings.max_attempts)


def expire_leases(ctx: AppContext) -> int:
    """Requeue the runs of expired leases (or end them after MAX_ATTEMPTS); return how many."""
    now = utcnow()
    with ctx.db.read() as session:
        expired = select(Lease.id).where(Lease.state == LeaseState.ACTIVE, Lease.expires_at <= now)
        due = session.scalar(expired.limit(1))
    if due is None:
        return 0
    with ctx.transaction() as tx:
        leases = list(
            tx.session.scalars(
                select(Lease)
                .where(Lease.state == LeaseState.ACTIVE, Lease.expires_at <= now)
                .with_for_update(skip_locked=True)
            )
        )
        for lease in leases:
            lease.state = LeaseState.EXPIRED
            lease.ended_at = now
            experiment = tx.session.get(Experiment, lease.experiment_id, with_for_update=True)
            run = tx.session.get(Run, lease.run_id, with_for_update=True)
            assert experiment is not None and run is not None
            deadline = lease.expires_at.isoformat()
            why = f"lease of attempt {lease.attempt} expired (no heartbeat before {deadline})"
            back_to_queue(
                tx, experiment, run, why, count_attempt=True, max_attempts=ctx.settings.max_attempts
            )
        return len(leases)
