"""Database reads for the web pages that the other crud modules do not offer.

Each function is a handful of indexed queries returning plain rows, so that the leaderboard stays
fast with tens of thousands of experiments (bench/pages.py measures it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from sqlalchemy import ColumnElement, Select, case, func, select
from sqlalchemy.orm import Session

from protocol.schemas import NoiseOut
from protocol.states import ExperimentStatus, LeaseState, RunState
from server.crud import noise as noise_crud
from server.crud.experiments import BASELINE_AGENT
from server.crud.tracks import best_sample, current_best, load_track, offer_of, pins_of
from server.models import (
    FIRST_TRACK_ID,
    ApiToken,
    Experiment,
    Lease,
    Note,
    Result,
    Run,
    Track,
    Worker,
    utcnow,
)
from server.rules.judge import Noise
from server.rules.tracks import refusal

# Statuses that end an experiment with an outcome worth plotting (cancelled ones were stopped,
# not judged).
PLOTTED_STATUSES = (
    ExperimentStatus.KEPT,
    ExperimentStatus.REVERTED,
    ExperimentStatus.REBASED,
    ExperimentStatus.STALE,
    ExperimentStatus.INFRA_FAILED,
)
PAGE_SIZE = 50
SortKey = Literal["id", "val_bpb", "finished", "status", "agent"]


@dataclass(frozen=True)
class Summary:
    best_val_bpb: float | None  # the mean of the best's valid runs
    best_runs: int
    best_unmeasured: bool  # there is a best (the baseline), but it has no valid run yet
    best_se: float | None
    noise: NoiseOut | None  # the track's, on its platform and harness
    best_experiment_id: int | None
    baseline_val_bpb: float | None
    baseline_experiment_id: int | None
    kept: int
    reverted: int  # measured, not kept (reverted, rebased or stale)
    crashed: int  # ended without a score: the run failed, or the infrastructure did
    running: int
    queued: int
    cancelled: int

    @property
    def improvement_percent(self) -> float | None:
        if self.best_val_bpb is None or not self.baseline_val_bpb:
            return None
        return (self.baseline_val_bpb - self.best_val_bpb) / self.baseline_val_bpb * 100.0


def status_totals(session: Session, track_id: int = FIRST_TRACK_ID) -> dict[str, tuple[int, int]]:
    """Per status: how many experiments of the track, and the sum of their ids."""
    rows = session.execute(
        select(Experiment.status, func.count(), func.coalesce(func.sum(Experiment.id), 0))
        .where(Experiment.track_id == track_id)
        .group_by(Experiment.status)
    )
    return {status: (int(n), int(ids)) for status, n, ids in rows}


def plotted_key(totals: dict[str, tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Identifies the set of plotted experiments and their statuses.

    A final status never changes and a finished experiment's score, description and finish time
    never change either, so the plotted experiments only ever grow in number: counts and id
    sums per status change whenever anything the chart shows changes.
    """
    return tuple(totals.get(status, (0, 0)) for status in PLOTTED_STATUSES)


def summary(
    session: Session, totals: dict[str, tuple[int, int]], crashed_runs: int, track_id: int = FIRST_TRACK_ID
) -> Summary:
    """A track's headline numbers; `crashed_runs` counts reverted experiments without a score (their
    run crashed, timed out or was invalid), which the chart cache knows."""
    project = load_track(session, track_id)
    best_runs, best_val_bpb = best_sample(session, track_id)
    noise = noise_crud.current_view(session, track_id, project.platform, project.harness_id, project.name)

    def total(*statuses: str) -> int:
        return sum(totals.get(status, (0, 0))[0] for status in statuses)

    baseline = None
    if project.baseline_commit is not None:
        baseline = session.execute(
            select(Experiment.id, Experiment.val_bpb)
            .where(Experiment.commit_sha == project.baseline_commit, Experiment.base_commit.is_(None))
            .order_by(Experiment.val_bpb.is_(None), Experiment.id)
            .limit(1)
        ).first()
    return Summary(
        best_val_bpb=best_val_bpb,
        best_runs=best_runs,
        best_unmeasured=project.best_experiment_id is not None and best_val_bpb is None,
        best_se=noise.sigma / best_runs**0.5
        if noise is not None and noise.sigma is not None and best_runs
        else None,
        noise=noise,
        best_experiment_id=project.best_experiment_id if best_val_bpb is not None else None,
        baseline_val_bpb=baseline.val_bpb if baseline else None,
        baseline_experiment_id=baseline.id if baseline else None,
        kept=total(ExperimentStatus.KEPT),
        reverted=total(ExperimentStatus.REVERTED, ExperimentStatus.REBASED, ExperimentStatus.STALE)
        - crashed_runs,
        crashed=crashed_runs + total(ExperimentStatus.INFRA_FAILED),
        running=total(ExperimentStatus.RUNNING),
        queued=total(ExperimentStatus.QUEUED),
        cancelled=total(ExperimentStatus.CANCELLED),
    )


class PlottedRow(NamedTuple):
    status: str
    finished_at: datetime | None
    id: int
    kept: bool
    val_bpb: float | None
    runs: int  # valid runs behind val_bpb (their mean)
    description: str  # only for kept experiments (the chart labels those alone)


def plotted_rows(
    session: Session, after: tuple[datetime, int] | None = None, track_id: int = FIRST_TRACK_ID
) -> list[PlottedRow]:
    """A track's plotted experiments in order of completion: all, or those after `after`
    (finished_at, id).

    Run as a Core statement on the session's connection: ten thousand plain rows, no ORM
    loading machinery in between.
    """
    kept = Experiment.status == ExperimentStatus.KEPT
    statement = (
        select(
            Experiment.status,
            Experiment.finished_at,
            Experiment.id,
            kept,
            Experiment.val_bpb,
            Experiment.valid_runs,
            case((kept, Experiment.description), else_=""),
        )
        .where(Experiment.status.in_(PLOTTED_STATUSES), Experiment.track_id == track_id)
        .order_by(Experiment.finished_at, Experiment.id)
    )
    if after is not None:
        finished_at, id_ = after
        later = Experiment.finished_at > finished_at
        statement = statement.where(later | ((Experiment.finished_at == finished_at) & (Experiment.id > id_)))
    return [PlottedRow._make(row) for row in session.connection().execute(statement)]


def kept_values(session: Session, track_id: int = FIRST_TRACK_ID) -> dict[int, tuple[float | None, int]]:
    """Every kept experiment's mean and valid runs now (a best's repeats keep changing them)."""
    statement = select(Experiment.id, Experiment.val_bpb, Experiment.valid_runs).where(
        Experiment.status == ExperimentStatus.KEPT, Experiment.track_id == track_id
    )
    return {row.id: (row.val_bpb, row.valid_runs) for row in session.connection().execute(statement)}


@dataclass(frozen=True)
class ChartSignature:
    """Changes whenever the chart does: the plotted experiments (plotted_key), and the best's
    runs and the noise estimate, which move the best's mean and its band."""

    plotted: tuple[tuple[int, int], ...]
    best_experiment_id: int | None
    best_runs: int
    best_mean: float | None
    noise: Noise | None


def chart_signature(
    session: Session, totals: dict[str, tuple[int, int]], track_id: int = FIRST_TRACK_ID
) -> ChartSignature:
    track = current_best(session, track_id)
    runs, mean = best_sample(session, track_id)
    estimate = noise_crud.noise(session, track_id, track.platform, track.harness_id)
    return ChartSignature(plotted_key(totals), track.best_experiment_id, runs, mean, estimate)


@dataclass(frozen=True)
class ExperimentRow:
    id: int
    status: str
    val_bpb: float | None
    runs: int  # valid runs behind val_bpb
    effect: float | None  # of the latest judgement: mean minus what it was compared with
    effect_se: float | None
    agent: str
    description: str
    finished_at: datetime | None
    created_at: datetime
    result_status: str | None  # the harness's verdict on its latest run (ok, crash...), None before one


@dataclass(frozen=True)
class TablePage:
    rows: list[ExperimentRow]
    total: int
    page: int
    pages: int
    size: int = PAGE_SIZE


def _agent_name() -> ColumnElement[str]:
    return func.coalesce(ApiToken.name, BASELINE_AGENT)


def _filtered(statement: Select, status: str | None, agent: str | None, track_id: int) -> Select:
    statement = statement.where(Experiment.track_id == track_id)
    if status is not None:
        statement = statement.where(Experiment.status == status)
    if agent == BASELINE_AGENT:
        statement = statement.where(Experiment.agent_id.is_(None))
    elif agent is not None:
        statement = statement.where(ApiToken.name == agent)
    return statement


def table_page(
    session: Session,
    *,
    status: str | None,
    agent: str | None,
    sort: SortKey,
    descending: bool,
    page: int,
    track_id: int = FIRST_TRACK_ID,
) -> TablePage:
    """One page of a track's experiments table, filtered and sorted; `page` counts from 1."""
    joined = (
        select(func.count()).select_from(Experiment).outerjoin(ApiToken, Experiment.agent_id == ApiToken.id)
    )
    total = int(session.scalar(_filtered(joined, status, agent, track_id)) or 0)
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(page, pages)
    column = {
        "id": Experiment.id,
        "val_bpb": Experiment.val_bpb,
        "finished": Experiment.finished_at,
        "status": Experiment.status,
        "agent": _agent_name(),
    }[sort]
    order = column.desc() if descending else column.asc()
    latest_result = (
        select(Result.status)
        .where(Result.experiment_id == Experiment.id)
        .order_by(Result.run_id.desc())
        .limit(1)
        .scalar_subquery()
    )
    statement = (
        select(
            Experiment.id,
            Experiment.status,
            Experiment.val_bpb,
            Experiment.valid_runs,
            Experiment.effect,
            Experiment.effect_se,
            _agent_name(),
            Experiment.description,
            Experiment.finished_at,
            Experiment.created_at,
            latest_result,
        )
        .select_from(Experiment)
        .outerjoin(ApiToken, Experiment.agent_id == ApiToken.id)
        # Unmeasured rows go last whichever way val_bpb is sorted; ties keep newest first.
        .order_by(order.nulls_last(), Experiment.id.desc())
        .limit(PAGE_SIZE)
        .offset((page - 1) * PAGE_SIZE)
    )
    rows = [
        ExperimentRow(*columns) for columns in session.execute(_filtered(statement, status, agent, track_id))
    ]
    return TablePage(rows, total, page, pages)


def agent_choices(session: Session) -> list[str]:
    """Names of everyone who submitted an experiment, for the agent filter."""
    names = session.scalars(
        select(ApiToken.name)
        .join(Experiment, Experiment.agent_id == ApiToken.id)
        .distinct()
        .order_by(ApiToken.name)
    ).all()
    has_baseline = session.scalar(select(Experiment.id).where(Experiment.agent_id.is_(None)).limit(1))
    return [BASELINE_AGENT, *names] if has_baseline is not None else list(names)


def note_authors(session: Session) -> list[str]:
    """Names of everyone who left a note, for the author filter."""
    return list(
        session.scalars(
            select(ApiToken.name).join(Note, Note.author_id == ApiToken.id).distinct().order_by(ApiToken.name)
        )
    )


@dataclass(frozen=True)
class Contribution:
    experiment_id: int
    improvement: float
    description: str


def best_contributions(session: Session, track_id: int = FIRST_TRACK_ID) -> dict[str, Contribution]:
    """Per agent, the kept experiment that took the most off the track's best."""
    gain = (Experiment.best_before_val_bpb - Experiment.val_bpb).label("gain")
    ranked = (
        select(
            ApiToken.name,
            Experiment.id,
            gain,
            Experiment.description,
            func.row_number()
            .over(partition_by=ApiToken.id, order_by=(gain.desc(), Experiment.id))
            .label("rank"),
        )
        .join(ApiToken, Experiment.agent_id == ApiToken.id)
        .where(
            Experiment.track_id == track_id,
            Experiment.status == ExperimentStatus.KEPT,
            Experiment.best_before_val_bpb.is_not(None),
            Experiment.val_bpb.is_not(None),
        )
        .subquery()
    )
    rows = session.execute(
        select(ranked.c.name, ranked.c.id, ranked.c.gain, ranked.c.description).where(ranked.c.rank == 1)
    )
    return {name: Contribution(id_, gain_, text) for name, id_, gain_, text in rows}


@dataclass(frozen=True)
class WorkerRow:
    name: str
    online: bool
    device: str
    memory_gb: float
    last_seen_at: datetime
    registered_at: datetime
    experiment_id: int | None  # what it runs now
    experiment_description: str | None
    results: int  # results it reported
    refused: str | None  # why no track accepts it (None: some track does)
    tracks: list[str]  # the tracks it serves


def workers(session: Session, lease_seconds: float, tracks: Sequence[Track] = ()) -> list[WorkerRow]:
    """Every registered worker with the tracks it serves (or why none accepts it); online means
    seen within two lease periods (as in /metrics)."""
    cutoff = utcnow() - timedelta(seconds=2 * lease_seconds)
    running = dict(
        (worker_id, (experiment_id, description))
        for worker_id, experiment_id, description in session.execute(
            select(Lease.worker_id, Experiment.id, Experiment.description)
            .join(Experiment, Experiment.id == Lease.experiment_id)
            .join(Run, Run.id == Lease.run_id)
            .where(Lease.state == LeaseState.ACTIVE, Run.status == RunState.RUNNING)
            .order_by(Lease.claimed_at)
        )
    )
    reported = dict(
        session.execute(select(Result.worker_id, func.count()).group_by(Result.worker_id)).tuples().all()
    )
    out = []
    for worker in session.scalars(select(Worker).order_by(Worker.last_seen_at.desc(), Worker.name)):
        current = running.get(worker.id)
        out.append(
            WorkerRow(
                name=worker.name,
                online=worker.last_seen_at >= cutoff,
                device=worker.device,
                memory_gb=worker.memory_gb,
                last_seen_at=worker.last_seen_at,
                registered_at=worker.registered_at,
                experiment_id=current[0] if current else None,
                experiment_description=current[1] if current else None,
                results=int(reported.get(worker.id, 0)),
                refused=worker.refused,
                tracks=[t.name for t in tracks if refusal(pins_of(t), offer_of(worker)) is None],
            )
        )
    return out


@dataclass(frozen=True)
class RunPlace:
    """Where an experiment ran (or runs): the worker and its device."""

    worker: str | None
    device: str | None


def run_place(session: Session, experiment_id: int) -> RunPlace:
    """The worker of the latest result, else of the latest lease (a run in progress or given up)."""
    row = session.execute(
        select(Worker.name, Result.device)
        .join(Result, Result.worker_id == Worker.id)
        .where(Result.experiment_id == experiment_id)
        .order_by(Result.run_id.desc())
        .limit(1)
    ).first()
    if row is not None:
        return RunPlace(row.name, row.device)
    row = session.execute(
        select(Worker.name, Worker.device)
        .join(Lease, Lease.worker_id == Worker.id)
        .where(Lease.experiment_id == experiment_id)
        .order_by(Lease.claimed_at.desc())
        .limit(1)
    ).first()
    return RunPlace(row.name, row.device) if row is not None else RunPlace(None, None)


def experiment_id_of_commit(session: Session, commit: str | None) -> int | None:
    if commit is None:
        return None
    return session.scalar(
        select(Experiment.id).where(Experiment.commit_sha == commit).order_by(Experiment.id).limit(1)
    )
