"""Reading experiments: one, a filtered page, the children of a commit, and their API views."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, or_, select
from sqlalchemy.orm import Session

from protocol.constants import STEP_STARTS, argument_step, entry_step
from protocol.schemas import BestBefore, ComparisonOut, ExperimentOut, ExperimentPage, ResultOut, RunOut
from protocol.states import AGENT_KINDS, RunState
from server.crud.runs import runs_of
from server.models import (
    AnyRow,
    ApiToken,
    Experiment,
    ExperimentChange,
    ExperimentConstant,
    Result,
    Run,
    Track,
    Worker,
)

BASELINE_AGENT = "baseline"


# The statements of what an agent polls, built once (building one costs about what running it does).
_AGENT_NAMES = select(ApiToken.id, ApiToken.name).where(ApiToken.id.in_(bindparam("ids", expanding=True)))
_WITH_AGENT = (
    select(Experiment, ApiToken.name, Track.name)
    .outerjoin(ApiToken, ApiToken.id == Experiment.agent_id)
    .join(Track, Track.id == Experiment.track_id)
    .where(Experiment.id == bindparam("id"))
)
_TRACK_NAMES = select(Track.id, Track.name).where(Track.id.in_(bindparam("ids", expanding=True)))
_RESULTS = (
    select(Result, Worker.name)
    .outerjoin(Worker, Worker.id == Result.worker_id)
    .where(Result.run_id.in_(bindparam("run_ids", expanding=True)))
)


def agent_names(session: Session, agent_ids: Iterable[int | None]) -> dict[int, str]:
    """Token id -> name, for the ids given (None, the baseline's, left out), in one query."""
    ids = {agent_id for agent_id in agent_ids if agent_id is not None}
    if not ids:
        return {}
    return {row.id: row.name for row in session.execute(_AGENT_NAMES, {"ids": list(ids)})}


def agent_label(names: Mapping[int, str], agent_id: int | None, gone: str = BASELINE_AGENT) -> str:
    """An experiment's agent as shown: its token's name (from agent_names); BASELINE_AGENT for the
    baseline's, which has none, and `gone` for a token that is gone."""
    return BASELINE_AGENT if agent_id is None else names.get(agent_id, gone)


def track_names(session: Session, track_ids: Iterable[int]) -> dict[int, str]:
    """Track id -> name, for the ids given, in one query."""
    ids = set(track_ids)
    return {row.id: row.name for row in session.execute(_TRACK_NAMES, {"ids": list(ids)})} if ids else {}


def labelled(session: Session, ids: Iterable[int]) -> dict[int, tuple[Experiment, str]]:
    """The experiments with these ids, by id, each with its agent as shown (agent_label), in two
    queries."""
    experiments = list(session.scalars(select(Experiment).where(Experiment.id.in_(list(ids)))))
    names = agent_names(session, (e.agent_id for e in experiments))
    return {e.id: (e, agent_label(names, e.agent_id)) for e in experiments}


def result_view(result: Result, worker: str | None) -> ResultOut:
    return ResultOut.model_validate(result, from_attributes=True).model_copy(update={"worker": worker})


def comparison_view(experiment: Experiment) -> ComparisonOut | None:
    """The numbers of the experiment's latest judgement, as stored."""
    if experiment.effect is None or experiment.compared_runs is None:
        return None
    return ComparisonOut(
        effect=experiment.effect,
        se=experiment.effect_se,
        runs=experiment.compared_runs,
        reference_runs=experiment.best_runs or 0,
        p_value=experiment.p_value,
        upper_bound=experiment.effect_bound,
        sigma=experiment.sigma,
        sigma_df=experiment.sigma_df,
    )


def views(
    session: Session,
    experiments: Sequence[Experiment],
    with_position: bool = False,
    names: dict[int, str] | None = None,
    tracks: dict[int, str] | None = None,
) -> list[ExperimentOut]:
    """API views of experiments: their runs (with their places in the queue), their runs' results,
    agent and track names (unless given), in four queries at most."""
    runs, places = runs_of(session, [e.id for e in experiments], with_places=with_position)
    finished = [r.id for rs in runs.values() for r in rs if r.status == RunState.FINISHED]
    found = session.execute(_RESULTS, {"run_ids": finished}).all() if finished else []
    results = {result.run_id: result for result, _ in found}
    workers = {result.run_id: name for result, name in found}
    if names is None:
        names = agent_names(session, (e.agent_id for e in experiments))
    if tracks is None:
        tracks = track_names(session, (e.track_id for e in experiments))
    out = []
    for e in experiments:
        own = runs.get(e.id, [])
        latest = next((results[r.id] for r in reversed(own) if r.id in results), None)
        # The experiment's place in the queue is its first queued run's.
        queued = next((r for r in own if r.status == RunState.QUEUED), None)
        run_seconds = (
            (e.finished_at - e.started_at).total_seconds() if e.finished_at and e.started_at else None
        )
        out.append(
            ExperimentOut(
                id=e.id,
                track=tracks[e.track_id],
                status=e.status,
                agent=agent_label(names, e.agent_id),
                source=e.source,
                description=e.description,
                hypothesis=e.hypothesis,
                base=e.base_commit,
                commit=e.commit_sha,
                attempts=own[-1].attempts if own else 0,
                cancel_requested=e.cancel_requested,
                queue_position=places.get(queued.id) if queued is not None else None,
                created_at=e.created_at,
                queued_at=e.queued_at,
                started_at=e.started_at,
                finished_at=e.finished_at,
                run_seconds=run_seconds if latest is not None else None,
                decision=e.decision,
                reason=e.decision_reason,
                best_before=BestBefore(commit=e.best_before_commit, val_bpb=e.best_before_val_bpb)
                if e.best_before_commit is not None
                else None,
                comparison=comparison_view(e),
                rebased_from=e.rebased_from_id,
                rebased_to=e.rebased_to_id,
                ported_from=e.ported_from_id,
                val_bpb=e.val_bpb,
                valid_runs=e.valid_runs,
                runs=[run_view(r, results.get(r.id), places.get(r.id)) for r in own],
                result=result_view(latest, workers.get(latest.run_id)) if latest is not None else None,
            )
        )
    return out


def run_view(run: Run, result: Result | None, queue_position: int | None) -> RunOut:
    return RunOut(
        number=run.number,
        kind=run.kind,
        state=run.status,
        seed=run.seed,
        attempts=run.attempts,
        queue_position=queue_position,
        started_at=run.started_at,
        finished_at=run.finished_at,
        result_status=result.status if result is not None else None,
        val_bpb=result.val_bpb if result is not None and result.status == "ok" else None,
    )


def get_view(session: Session, experiment_id: int) -> ExperimentOut | None:
    """What an agent polls: the experiment read with its agent's name, and its runs with their
    places in the queue (2 queries; 3 once a run finished)."""
    row = session.execute(_WITH_AGENT, {"id": experiment_id}).first()
    if row is None:
        return None
    experiment, name, track = row
    names = {experiment.agent_id: name} if experiment.agent_id is not None and name is not None else {}
    return views(session, [experiment], with_position=True, names=names, tracks={experiment.track_id: track})[
        0
    ]


def list_page(
    session: Session,
    *,
    track_id: int | None = None,
    status: str | None,
    agent: str | None,
    base: str | None,
    since: datetime | None,
    limit: int,
    before_id: int | None,
    text: str | None = None,
    touched: Touched | None = None,
) -> ExperimentPage:
    """Newest first; `before_id` is the cursor (the last id of the previous page)."""
    statement = select(Experiment).order_by(Experiment.id.desc()).limit(limit + 1)
    if track_id is not None:
        statement = statement.where(Experiment.track_id == track_id)
    if status is not None:
        statement = statement.where(Experiment.status == status)
    if agent is not None:
        if agent == BASELINE_AGENT:
            statement = statement.where(Experiment.agent_id.is_(None))
        else:
            agent_ids = select(ApiToken.id).where(ApiToken.name == agent, ApiToken.kind.in_(AGENT_KINDS))
            statement = statement.where(Experiment.agent_id.in_(agent_ids))
    if base is not None:
        statement = statement.where(Experiment.base_commit == base.lower())
    if since is not None:
        statement = statement.where(Experiment.created_at >= since)
    if text is not None:
        statement = statement.where(
            Experiment.description.icontains(text, autoescape=True)
            | Experiment.hypothesis.icontains(text, autoescape=True)
        )
    if touched is not None:
        statement = touched.filter(statement)
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
    prefix = rev.lower()
    found = list(session.scalars(_COMMITS_FROM, {"prefix": prefix, "end": prefix + "g"}))
    if not found:
        raise LookupError(f"no experiment has commit {rev}")
    if len(found) > 1:
        raise LookupError(f"{rev} names more than one commit; give more digits")
    return found[0]


# The first two distinct commits from `prefix` on, below `end` ("g" sorts after every hex digit).
_COMMITS_FROM = (
    select(Experiment.commit_sha)
    .where(Experiment.commit_sha >= bindparam("prefix"), Experiment.commit_sha < bindparam("end"))
    .group_by(Experiment.commit_sha)
    .order_by(Experiment.commit_sha)
    .limit(2)
)


def by_commit(session: Session, commit: str) -> Experiment | None:
    """The experiment whose commit this is (the oldest, should two share it)."""
    return session.scalars(
        select(Experiment).where(Experiment.commit_sha == commit).order_by(Experiment.id).limit(1)
    ).first()


def status_of_commit(session: Session, commit: str, track_id: int) -> AnyRow | None:
    """The status and decision reason of the track's experiment whose commit this is (the oldest,
    should two share it)."""
    return session.execute(
        select(Experiment.status, Experiment.decision_reason)
        .where(Experiment.commit_sha == commit, Experiment.track_id == track_id)
        .order_by(Experiment.id)
        .limit(1)
    ).first()


@dataclass(frozen=True)
class Touched:
    """GET /experiments (and MCP's search) by what a change touched: a constant it set (its name;
    for a knob, protocol/constants.py, also its last part or a path above it: `width` and
    `DEVICE_SETTINGS` both find `DEVICE_SETTINGS["cuda"].width`), or text one of its changed
    lines contains (case-sensitive, whitespace collapsed as the stored lines are)."""

    constant: str | None = None
    line: str | None = None

    def filter(self, statement: Select[Any]) -> Select[Any]:
        if self.constant is not None:
            name, wanted = ExperimentConstant.name, self.constant
            setting = select(ExperimentConstant.experiment_id).where(
                or_(
                    name == wanted,
                    name.endswith(argument_step(wanted), autoescape=True),
                    name.endswith(entry_step(wanted), autoescape=True),
                    *(name.startswith(wanted + start, autoescape=True) for start in STEP_STARTS),
                )
            )
            statement = statement.where(Experiment.id.in_(setting))
        if self.line is not None:
            text = " ".join(self.line.split())
            lines = select(ExperimentChange.experiment_id).where(
                ExperimentChange.touched.contains(text, autoescape=True)
            )
            statement = statement.where(Experiment.id.in_(lines))
        return statement
