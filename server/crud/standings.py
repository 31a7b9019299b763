"""A track's best and leaderboard (kept lineage, best results, per-agent standing), and agents."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session

from protocol.schemas import AgentStanding, LineageEntry, RankedResult
from protocol.states import AGENT_KINDS, ExperimentStatus
from server.crud import integrity
from server.crud import noise as noise_crud
from server.crud.experiments import agent_label, agent_names
from server.crud.tokens import ENV_ADMIN_NAME
from server.crud.tracks import TrackState, best_sample
from server.models import AnyRow, ApiToken, Experiment


@dataclass(frozen=True)
class BestState:
    """A track's best as the database holds it; its train.py is in git, for the caller to read."""

    track: str
    commit: str
    val_bpb: float | None  # the mean of its valid runs
    runs: int
    se: float | None
    experiment_id: int | None
    platform: str | None
    harness_id: str | None
    measured_on: str | None  # judge.Provenance in words


def best(session: Session, track: TrackState) -> BestState | None:
    if track.best_commit is None:
        return None
    runs, mean = best_sample(session, track.id)
    estimate = noise_crud.noise(session, track.id, track.platform, track.harness_id)
    provenance = None
    if track.best_experiment_id is not None:
        experiment = session.get(Experiment, track.best_experiment_id)
        baseline = experiment is not None and experiment.base_commit is None
        provenance = noise_crud.provenance(
            session, track.best_experiment_id, baseline, track.platform, track.harness_id
        )
    return BestState(
        track=track.name,
        commit=track.best_commit,
        val_bpb=mean,
        runs=runs,
        se=estimate.sigma / runs**0.5 if estimate is not None and runs else None,
        experiment_id=track.best_experiment_id,
        platform=track.platform,
        harness_id=track.harness_id,
        measured_on=provenance.in_words() if provenance is not None else None,
    )


def lineage(session: Session, track_id: int) -> list[LineageEntry]:
    """Every kept experiment of the track in the order it became the best: the path from its
    baseline."""
    kept = list(
        session.scalars(
            select(Experiment)
            .where(Experiment.status == ExperimentStatus.KEPT, Experiment.track_id == track_id)
            .order_by(Experiment.finished_at)
        )
    )
    names = agent_names(session, (e.agent_id for e in kept))
    return [
        LineageEntry(
            experiment_id=e.id,
            commit=e.commit_sha,
            val_bpb=e.val_bpb,
            improvement=e.best_before_val_bpb - e.val_bpb
            if e.best_before_val_bpb is not None and e.val_bpb is not None
            else None,
            agent=agent_label(names, e.agent_id),
            description=e.description,
            finished_at=e.finished_at,
        )
        for e in kept
    ]


def top_results(session: Session, track: TrackState, limit: int = 20) -> list[RankedResult]:
    """The lowest val_bpb of the track measured on its platform, whatever was decided."""
    platform = track.platform
    statement = (
        select(Experiment)
        .where(Experiment.val_bpb.is_not(None), Experiment.track_id == track.id)
        .order_by(Experiment.val_bpb, Experiment.id)
    )
    if platform is not None:
        statement = statement.where(Experiment.platform == platform)
    rows = list(session.scalars(statement.limit(limit)))
    names = agent_names(session, (e.agent_id for e in rows))
    return [
        RankedResult(
            experiment_id=e.id,
            commit=e.commit_sha,
            val_bpb=e.val_bpb,
            status=e.status,
            agent=agent_label(names, e.agent_id),
            description=e.description,
        )
        for e in rows
    ]


def _count(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return func.sum(case((condition, 1), else_=0))


def agent_totals(session: Session) -> dict[tuple[int, int], AnyRow]:
    """Per track and agent id: counts by outcome, best val_bpb, total improvement, last submission.

    One aggregate over all experiments, grouped by track and agent.
    """
    improvement = case(
        (Experiment.status == ExperimentStatus.KEPT, Experiment.best_before_val_bpb - Experiment.val_bpb),
        else_=0.0,
    )
    measured_not_kept = Experiment.status.in_(
        (ExperimentStatus.REVERTED, ExperimentStatus.REBASED, ExperimentStatus.STALE)
    ) & Experiment.val_bpb.is_not(None)
    no_valid_result = (Experiment.status == ExperimentStatus.INFRA_FAILED) | (
        (Experiment.status == ExperimentStatus.REVERTED) & Experiment.val_bpb.is_(None)
    )
    statement = (
        select(
            Experiment.track_id,
            Experiment.agent_id,
            # A change re-applied onto a new best is the same submission: its copy replaces the
            # experiment it came from (which ends `rebased`), so each rebased one is not counted.
            (func.count() - _count(Experiment.status == ExperimentStatus.REBASED)).label("submitted"),
            _count(Experiment.status == ExperimentStatus.QUEUED).label("queued"),
            _count(Experiment.status == ExperimentStatus.RUNNING).label("running"),
            _count(Experiment.status == ExperimentStatus.KEPT).label("kept"),
            _count(measured_not_kept).label("reverted"),
            _count(no_valid_result).label("failed"),
            func.min(Experiment.val_bpb).label("best_val_bpb"),
            func.coalesce(func.sum(improvement), 0.0).label("improvement"),
            func.max(Experiment.created_at).label("last_submitted_at"),
        )
        .where(Experiment.agent_id.is_not(None))
        .group_by(Experiment.track_id, Experiment.agent_id)
    )
    return {(row.track_id, row.agent_id): row for row in session.execute(statement)}


def agent_standings(
    session: Session, track_id: int, totals: dict[tuple[int, int], AnyRow] | None = None
) -> list[AgentStanding]:
    """Every agent's standing on a track, best first; `totals` from `agent_totals` (computed when
    not given). Tokens and integrity holds are the agent's on every track."""
    if totals is None:
        totals = agent_totals(session)
    tokens = session.execute(select(ApiToken.id, ApiToken.name).where(ApiToken.kind.in_(AGENT_KINDS)))
    held = integrity.open_events(session)
    standings = []
    for token_id, name in tokens:
        row = totals.get((track_id, token_id))
        events = held.get(token_id, [])
        if row is None:
            if name != ENV_ADMIN_NAME:  # the environment's admin token is listed once it submitted
                standings.append(
                    AgentStanding(
                        agent=name,
                        submitted=0,
                        queued=0,
                        running=0,
                        kept=0,
                        reverted=0,
                        failed=0,
                        best_val_bpb=None,
                        improvement=0.0,
                        last_submitted_at=None,
                        integrity_events=events,
                    )
                )
            continue
        standings.append(
            AgentStanding(
                agent=name,
                submitted=row.submitted,
                queued=row.queued or 0,
                running=row.running or 0,
                kept=row.kept or 0,
                reverted=row.reverted or 0,
                failed=row.failed or 0,
                best_val_bpb=row.best_val_bpb,
                improvement=row.improvement or 0.0,
                last_submitted_at=row.last_submitted_at,
                integrity_events=events,
            )
        )
    standings.sort(
        key=lambda s: (
            -s.improvement,
            -s.kept,
            s.best_val_bpb if s.best_val_bpb is not None else 1e30,
            s.agent,
        )
    )
    return standings
