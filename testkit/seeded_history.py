"""A night of research written straight into a project's database, for the pages: kept experiments
improving the best step by step, most reverted, some crashed, a few running and queued, each
finished one with its lease and result row (bench/pages.py at 10,000, bench/api_load.py at 100,000,
tests/pages at a few dozen).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from protocol.states import Decision, ExperimentStatus, LeaseState, RunKind, RunState, TokenKind
from server.core.db import Database
from server.crud.tokens import create_token
from server.crud.tracks import last_experiment_id, load_track
from server.models import ApiToken, Experiment, Lease, Result, Run, Worker

HARNESS_ID = "bench-harness"
PLATFORM = "bench-device"
KEPT = 0.05  # of the finished experiments: a night's share of keeps
BATCH = 5000  # experiments written in one transaction
IDEAS = (
    "double the matrix learning rate", "halve the warmdown", "wider MLP", "deeper by two layers",
    "remove the logit softcap", "sliding window on odd layers", "rope base 50000", "weight decay 0.1",
    "muon momentum 0.9", "embedding lr 0.8", "batch size x2", "shorter warmup", "tied embeddings",
    "value embeddings", "squared relu", "zero-init projections",
)  # fmt: skip


def _token_id(session: Session, kind: TokenKind, name: str) -> int:
    statement = select(ApiToken.id).where(ApiToken.kind == kind, ApiToken.name == name)
    if session.scalar(statement) is None:
        create_token(session, kind, name)
    return int(session.scalar(statement))  # type: ignore[arg-type]


def _worker_id(session: Session, start: datetime) -> str:
    token_id = _token_id(session, TokenKind.WORKER, "bench-workers")
    existing = session.scalar(select(Worker.id).where(Worker.token_id == token_id))
    if existing is not None:
        return existing
    worker_id = str(uuid.uuid4())
    session.execute(
        insert(Worker),
        [{"id": worker_id, "token_id": token_id, "name": "gpu-0", "device": PLATFORM, "memory_gb": 80.0,
          "harness_id": HARNESS_ID, "registered_at": start, "last_seen_at": start}],
    )  # fmt: skip
    return worker_id


def seed_experiments(
    db: Database,
    count: int,
    *,
    in_flight: int = 4,
    agents: Sequence[str] = ("alice", "bob", "carol"),
    seed: int = 0,
    kept: float = KEPT,
) -> None:
    """Add `count` experiments, the newest `in_flight` of them running or queued, as agents made them;
    a share `kept` of the finished ones is kept (0: the best stays, as when every idea failed).

    The baseline's commit stands in for every candidate's commit (the pages read commits only on
    an experiment's own page). The project's best becomes the last kept experiment. Can be called
    again to add more. Written BATCH experiments a transaction, so that a hundred thousand fit
    in memory (bench/api_load.py).
    """
    rng = random.Random(seed)
    with db.write() as session:
        project = load_track(session)
        baseline = session.scalars(select(Experiment).where(Experiment.base_commit.is_(None))).one()
        commit = baseline.commit_sha
        best_experiment = session.get(Experiment, project.best_experiment_id)
        best = best_experiment.val_bpb if best_experiment and best_experiment.val_bpb is not None else 1.0
        agent_ids = [_token_id(session, TokenKind.AGENT, name) for name in agents]
        # After everything already there: the chart orders experiments by when they finished.
        latest = session.scalar(select(func.max(Experiment.created_at)))
        start = max(
            datetime.now(UTC) - timedelta(minutes=6 * count), latest or datetime.min.replace(tzinfo=UTC)
        )
        worker_id = _worker_id(session, start)
        first_id = last_experiment_id(session) + 1
        first_run_id = int(session.scalar(select(func.max(Run.id))) or 0) + 1
        best_id = project.best_experiment_id
    for batch in range(0, count, BATCH):
        experiments, runs, leases, results = [], [], [], []
        for n in range(batch, min(batch + BATCH, count)):
            id_ = first_id + n
            created = start + timedelta(minutes=6 * n)
            if n >= count - in_flight:  # the newest few are still running or queued
                status, val_bpb, run_status = (
                    (ExperimentStatus.RUNNING if n == count - in_flight else ExperimentStatus.QUEUED),
                    None,
                    None,
                )
            else:
                status, val_bpb, run_status = _outcome(rng, best, kept)
            finished = (
                created + timedelta(minutes=5, seconds=30)
                if run_status or status == ExperimentStatus.INFRA_FAILED
                else None
            )
            experiments.append(
                dict(
                    id=id_, agent_id=rng.choice(agent_ids), source="agent", base_commit=commit,
                    commit_sha=commit, description=f"{rng.choice(IDEAS)} (try {n})", status=status,
                    created_at=created, queued_at=created,
                    started_at=created + timedelta(seconds=20) if status != ExperimentStatus.QUEUED else None,
                    finished_at=finished, decision=DECISIONS.get(status),
                    decision_reason="seeded by testkit/seeded_history.py" if finished else None,
                    best_before_commit=commit if run_status else None,
                    best_before_val_bpb=best if run_status else None,
                    effect=val_bpb - best if val_bpb is not None else None,
                    compared_runs=1 if val_bpb is not None else None,
                    best_runs=1 if val_bpb is not None else None,
                    val_bpb=val_bpb, valid_runs=1 if val_bpb is not None else 0, val_bpb_m2=0.0,
                    platform=PLATFORM if run_status else None,
                )
            )  # fmt: skip
            run_state = {ExperimentStatus.QUEUED: RunState.QUEUED, ExperimentStatus.RUNNING: RunState.RUNNING}
            runs.append(
                dict(
                    id=first_run_id + n, experiment_id=id_, number=1, seed=n, kind=RunKind.FIRST,
                    status=run_state.get(status, RunState.FINISHED if run_status else RunState.INFRA_FAILED),
                    attempts=1, queued_at=created, started_at=experiments[-1]["started_at"],
                    finished_at=finished,
                )
            )  # fmt: skip
            if run_status is not None and finished is not None:
                lease_id = str(uuid.uuid4())
                leases.append(
                    dict(
                        id=lease_id, experiment_id=id_, run_id=first_run_id + n, worker_id=worker_id,
                        attempt=1, state=LeaseState.FINISHED,
                        claimed_at=created, expires_at=finished, ended_at=finished,
                    )
                )  # fmt: skip
                results.append(
                    dict(
                        id=str(uuid.uuid4()), experiment_id=id_, run_id=first_run_id + n, lease_id=lease_id,
                        worker_id=worker_id, seed=n,
                        received_at=finished, status=run_status, val_bpb=val_bpb,
                        error_class="train_error" if run_status == "crash" else None,
                        training_seconds=300.0, total_seconds=330.0, peak_memory_mb=44_000.0,
                        tokens=500_000_000, steps=950, num_params=50_000_000, mfu_percent=40.0,
                        device=PLATFORM, harness_id=HARNESS_ID, sandbox=True, log_tail="",
                    )
                )  # fmt: skip
            if status == ExperimentStatus.KEPT and val_bpb is not None:
                best, best_id = val_bpb, id_
        with db.write() as session:
            session.execute(insert(Experiment), experiments)
            session.execute(insert(Run), runs)
            if leases:
                session.execute(insert(Lease), leases)
                session.execute(insert(Result), results)
    with db.write() as session:
        load_track(session).best_experiment_id = best_id


DECISIONS = {ExperimentStatus.KEPT: Decision.KEEP, ExperimentStatus.REVERTED: Decision.REVERT}


def _outcome(
    rng: random.Random, best: float, kept: float
) -> tuple[ExperimentStatus, float | None, str | None]:
    """Status, val_bpb and run status of one finished experiment: a share `kept` kept, 8% crashed,
    2% lost by the infrastructure, the rest worse than the best.

    Keeps gain less and less as the best nears a floor of 0.8, as a long night of research does.
    """
    roll = rng.random()
    if roll < kept:
        return ExperimentStatus.KEPT, best - 0.0006 - (best - 0.8) * rng.uniform(0.0, 0.03), "ok"
    if roll < kept + 0.08:
        return ExperimentStatus.REVERTED, None, "crash"
    if roll < kept + 0.10:
        return ExperimentStatus.INFRA_FAILED, None, None
    return ExperimentStatus.REVERTED, best + abs(rng.gauss(0.004, 0.006)), "ok"
