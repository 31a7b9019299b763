"""Creating candidate experiments (from submissions and from re-applying onto a new best)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from protocol.events import Queued
from protocol.states import ExperimentStatus, RunKind
from server.context import AppContext
from server.core.problems import Problem
from server.crud.runs import queue_runs
from server.crud.similar import same_train_py_and_queued, store_change
from server.crud.tokens import Principal
from server.crud.tracks import TrackRef
from server.models import Experiment, utcnow
from server.trainpy.changes import ChangeSummary
from server.transaction import Transaction


def commit_message(description: str, hypothesis: str | None) -> str:
    return f"{description}\n\nHypothesis: {hypothesis}\n" if hypothesis else f"{description}\n"


@dataclass(frozen=True)
class Candidate:
    """A change of train.py committed on its base and ready to queue: what it says and where it is."""

    description: str
    hypothesis: str | None
    base_commit: str
    commit_sha: str
    blob: str  # its train.py's git blob
    change: ChangeSummary  # for "has this been tried?"


def queue_candidate(
    ctx: AppContext,
    tx: Transaction,
    candidate: Candidate,
    *,
    track: TrackRef,
    agent_id: int | None,
    source: str,
    queued_at: datetime | None = None,
    rebased_from_id: int | None = None,
    ported_from_id: int | None = None,
) -> Experiment:
    """Insert a queued experiment of the track (and its first run) for a candidate, with the summary
    of its change, and point its ref at its commit."""
    track_id, track_name = track
    now = utcnow()
    experiment = Experiment(
        track_id=track_id,
        agent_id=agent_id,
        source=source,
        description=candidate.description,
        hypothesis=candidate.hypothesis,
        base_commit=candidate.base_commit,
        commit_sha=candidate.commit_sha,
        train_py_blob=candidate.blob,
        status=ExperimentStatus.QUEUED,
        cancel_requested=False,
        created_at=now,
        queued_at=queued_at or now,
        rebased_from_id=rebased_from_id,
        ported_from_id=ported_from_id,
    )
    tx.session.add(experiment)
    tx.session.flush()
    experiment_id = experiment.id
    queue_runs(tx.session, experiment_id, track_id, RunKind.FIRST, experiment.queued_at, new=True)
    store_change(tx.session, experiment_id, candidate.change)
    ctx.repo.set_experiment_ref(experiment_id, candidate.commit_sha)
    tx.undo.append(lambda: ctx.repo.delete_experiment_ref(experiment_id))
    tx.emit(
        Queued(
            experiment_id=experiment_id,
            description=candidate.description,
            base=candidate.base_commit,
            commit=candidate.commit_sha,
            track=track_name,
        ),
    )
    return experiment


def queue_submission(
    ctx: AppContext,
    tx: Transaction,
    agent: Principal,
    candidate: Candidate,
    track: TrackRef,
    ported_from_id: int | None = None,
) -> tuple[int, bool]:
    """An agent's submission (or port) to a track (id, name), in the transaction with the track
    locked: the experiment of the track with this train.py if there is one by now (its id, False),
    else a new one queued (its id, True). Problem 429 if the agent already has its limit of
    experiments queued."""
    existing, queued = same_train_py_and_queued(tx.session, candidate.blob, agent.id, track.id)
    if existing is not None:
        return existing, False
    limit = ctx.settings.max_queued_per_agent
    if queued >= limit:
        raise Problem(
            429,
            "too-many-queued",
            f"agent {agent.name} has {queued} experiments queued (limit {limit}); "
            "wait for some to start or cancel some",
            headers={"Retry-After": "10"},
        )
    source = "agent" if ported_from_id is None else "port"
    queued_as = queue_candidate(
        ctx,
        tx,
        candidate,
        track=track,
        agent_id=agent.id,
        source=source,
        ported_from_id=ported_from_id,
    )
    return queued_as.id, True
