"""Reading experiments: one, a filtered page, the children of a commit, and their API views."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, bindparam, func, or_, select
from sqlalchemy.orm import Session

from server.models import EXPERIMENTS, QUEUED, ApiToken, Experiment, Result
from server.schemas import BestBefore, ExperimentOut, ExperimentPage, ResultOut

BASELINE_AGENT = "baseline"


def agent_names(session: Session, agent_ids: set[int]) -> dict[int, str]:
    if not agent_ids:
        return {}
    rows = session.execute(select(ApiToken.id, ApiToken.name).where(ApiToken.id.in_(agent_ids)))
    return {row.id: row.name for row in rows}


def result_view(result: Result) -> ResultOut:
    return ResultOut.model_validate(result, from_attributes=True)


def queue_position(session: Session, experiment: Experiment) -> int:
    ahead = select(func.count()).where(
        Experiment.status == QUEUED,
        or_(
            Experiment.queued_at < experiment.queued_at,
            and_(Experiment.queued_at == experiment.queued_at, Experiment.id < experiment.id),
        ),
    )
    return int(session.scalar(ahead) or 0)


def views(
    session: Session, experiments: Sequence[Experiment], with_position: bool = False
) -> list[ExperimentOut]:
    """API views of experiments, loading their results and agent names in two queries at most."""
    # A result is recorded in the transaction that sets finished_at: an experiment still queued or
    # running (what agents poll) has none to look for.
    ids = [e.id for e in experiments if e.finished_at is not None]
    results = (
        {r.experiment_id: r for r in session.scalars(select(Result).where(Result.experiment_id.in_(ids)))}
        if ids
        else {}
    )
    names = agent_names(session, {e.agent_id for e in experiments if e.agent_id is not None})
    out = []
    for e in experiments:
        result = results.get(e.id)
        run_seconds = (
            (e.finished_at - e.started_at).total_seconds() if e.finished_at and e.started_at else None
        )
        decided = e.decision is not None
        out.append(
            ExperimentOut(
                id=e.id,
                status=e.status,  # type: ignore[arg-type]
                agent=names.get(e.agent_id, BASELINE_AGENT) if e.agent_id is not None else BASELINE_AGENT,
                source=e.source,  # type: ignore[arg-type]
                description=e.description,
                hypothesis=e.hypothesis,
                base=e.base_commit,
                commit=e.commit_sha,
                attempts=e.attempts,
                cancel_requested=e.cancel_requested,
                queue_position=queue_position(session, e) if with_position and e.status == QUEUED else None,
                created_at=e.created_at,
                queued_at=e.queued_at,
                started_at=e.started_at,
                finished_at=e.finished_at,
                run_seconds=run_seconds if result is not None else None,
                decision=e.decision,  # type: ignore[arg-type]
                reason=e.decision_reason,
                best_before=BestBefore(commit=e.best_before_commit, val_bpb=e.best_before_val_bpb)
                if decided
                else None,
                rebased_from=e.rebased_from_id,
                rebased_to=e.rebased_to_id,
                val_bpb=e.val_bpb,
                result=result_view(result) if result is not None else None,
            )
        )
    return out


def get_view(session: Session, experiment_id: int) -> ExperimentOut | None:
    experiment = session.get(Experiment, experiment_id)
    return views(session, [experiment], with_position=True)[0] if experiment else None


def list_page(
    session: Session,
    *,
    status: str | None,
    agent: str | None,
    base: str | None,
    since: datetime | None,
    limit: int,
    before_id: int | None,
) -> ExperimentPage:
    """Newest first; `before_id` is the cursor (the last id of the previous page)."""
    statement = select(Experiment).order_by(Experiment.id.desc()).limit(limit + 1)
    if status is not None:
        statement = statement.where(Experiment.status == status)
    if agent is not None:
        if agent == BASELINE_AGENT:
            statement = statement.where(Experiment.agent_id.is_(None))
        else:
            agent_ids = select(ApiToken.id).where(
                ApiToken.name == agent, ApiToken.kind.in_(("agent", "admin"))
            )
            statement = statement.where(Experiment.agent_id.in_(agent_ids))
    if base is not None:
        statement = statement.where(Experiment.base_commit == base.lower())
    if since is not None:
        statement = statement.where(Experiment.created_at >= since)
    if before_id is not None:
        statement = statement.where(Experiment.id < before_id)
    rows = list(session.scalars(statement))
    page, more = rows[:limit], len(rows) > limit
    return ExperimentPage(items=views(session, page), next_cursor=str(page[-1].id) if more else None)


def children(session: Session, commit: str, limit: int) -> list[ExperimentOut]:
    statement = (
        select(Experiment).where(Experiment.base_commit == commit).order_by(Experiment.id.desc()).limit(limit)
    )
    return views(session, list(session.scalars(statement)))


def resolve_commit(session: Session, rev: str) -> str:
    """The experiment commit named by a full or abbreviated (4+ hex digits) id.

    Every commit in the research repo is an experiment's, so the database answers this without
    asking git. Raises LookupError saying what is wrong.
    """
    prefix, end = rev.lower(), rev.lower() + "g"  # "g" sorts after every hex digit
    in_range = (Experiment.commit_sha >= prefix) & (Experiment.commit_sha < end)
    first = session.scalar(
        select(Experiment.commit_sha).where(in_range).order_by(Experiment.commit_sha).limit(1)
    )
    if first is None:
        raise LookupError(f"no experiment has commit {rev}")
    other = session.scalar(
        select(Experiment.commit_sha).where(in_range, Experiment.commit_sha > first).limit(1)
    )
    if other is not None:
        raise LookupError(f"{rev} names more than one commit; give more digits")
    return first


_MEASURED_BPB = (
    select(EXPERIMENTS.c.val_bpb)
    .where(EXPERIMENTS.c.commit_sha == bindparam("commit"))
    .order_by(EXPERIMENTS.c.id)
    .limit(1)
)


def measured_bpb(session: Session, commit: str) -> float | None:
    """The val_bpb of the commit's experiment (as `by_commit`), read on every result on an old base."""
    return session.connection().execute(_MEASURED_BPB, {"commit": commit}).scalar()


def by_commit(session: Session, commit: str) -> Experiment | None:
    """The experiment whose commit this is (the oldest, should two share it)."""
    return session.scalars(
        select(Experiment).where(Experiment.commit_sha == commit).order_by(Experiment.id).limit(1)
    ).first()
