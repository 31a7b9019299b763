"""The tracks: each one's pins (harness id, platform) and its current best.

A track is a preset on a platform with its own baseline, best lineage and noise (server/models.py,
Track). `TrackState` is what a result is counted and judged against, read cheaply for every
result, and row-locked where a decision moves the best; the ORM `Track` is where the pins are set
(init, the server's start, a worker's registration) and where the admin's changes go.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from protocol.states import ExperimentStatus, RunKind, RunState
from server.core.problems import Problem
from server.crud.runs import queue_runs
from server.models import EXPERIMENTS, FIRST_TRACK_ID, RUNS, TRACKS, Experiment, Track, Worker
from server.rules.tracks import Offer, Pins
from server.trainpy.research_repo import best_branch


def pins_of(track: Track) -> Pins:
    """A track as the acceptance rule reads it (server/rules/tracks.py)."""
    return Pins(
        name=track.name,
        preset=track.preset,
        platforms=track.platforms,
        platform=track.platform,
        harness_id=track.harness_id,
        archived=track.archived_at is not None,
    )


def offer_of(worker: Worker) -> Offer:
    """What a worker registered with, as the acceptance rule reads it."""
    return Offer(device=worker.device, harness_id=worker.harness_id, preset=worker.preset)


def load_track(session: Session, track_id: int = FIRST_TRACK_ID, lock: bool = False) -> Track:
    """The track; `lock` takes its row lock (PostgreSQL), serialising decisions on its best.

    A locked read refreshes the row even if this session loaded it before.
    """
    statement = select(Track).where(Track.id == track_id)
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.scalars(statement).one()


def all_tracks(session: Session, archived: bool = True, lock: bool = False) -> list[Track]:
    """Every track, the first first; without `archived`, only those not archived. `lock` takes
    their row locks (PostgreSQL), in id order."""
    statement = select(Track).order_by(Track.id)
    if not archived:
        statement = statement.where(Track.archived_at.is_(None))
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return list(session.scalars(statement))


def by_name(session: Session, name: str) -> Track | None:
    return session.scalars(select(Track).where(Track.name == name)).first()


def names(session: Session) -> dict[int, str]:
    """Track id -> name, for every track."""
    return {row.id: row.name for row in session.execute(select(Track.id, Track.name))}


def name_of(session: Session, track_id: int) -> str:
    name = session.scalar(select(Track.name).where(Track.id == track_id))
    assert name is not None
    return name


def named_or_only(session: Session, name: str | None) -> Track:
    """The track a request names, or, when it names none, the only track not archived: `404
    unknown-track` for a name no track has, `422 track-required` when several could be meant."""
    if name is not None:
        track = by_name(session, name)
        if track is None:
            known = ", ".join(t.name for t in all_tracks(session)) or "none"
            raise Problem(404, "unknown-track", f"no track named {name!r}; the tracks are: {known}")
        return track
    active = all_tracks(session, archived=False)
    if len(active) == 1:
        return active[0]
    listed = ", ".join(t.name for t in active)
    raise Problem(
        422,
        "track-required",
        f"this server has {len(active)} tracks ({listed}): name one (REST: `track`; CLI: --track or "
        "$AUTORESEARCH_TRACK; MCP: the `track` argument)",
    )


class TrackRef(NamedTuple):
    """A track as a flow passes it on: its id and name."""

    id: int
    name: str


@dataclass(frozen=True)
class TrackState:
    """A track's pins and its best, as read: what a result is counted and judged against, and what
    decisions move on (with its row locked)."""

    id: int
    name: str
    harness_id: str | None
    platform: str | None
    best_commit: str | None
    best_experiment_id: int | None
    # The last experiment id when the best became the best (server/flows/decisions.py, best_repeats_due).
    best_since_experiment_id: int | None

    @property
    def branch(self) -> str:
        """Its best's branch in the research repo."""
        return best_branch(self.id == FIRST_TRACK_ID, self.name)


_CURRENT_BEST = select(
    TRACKS.c.id,
    TRACKS.c.name,
    TRACKS.c.harness_id,
    TRACKS.c.platform,
    TRACKS.c.best_commit,
    TRACKS.c.best_experiment_id,
    TRACKS.c.best_since_experiment_id,
).where(TRACKS.c.id == bindparam("track_id"))
_LOCKED_BEST = _CURRENT_BEST.with_for_update()
_BEST_SAMPLE = (
    select(EXPERIMENTS.c.valid_runs, EXPERIMENTS.c.val_bpb)
    .select_from(TRACKS.join(EXPERIMENTS, EXPERIMENTS.c.id == TRACKS.c.best_experiment_id))
    .where(TRACKS.c.id == bindparam("track_id"))
)
_SUBMITTED_SINCE = select(func.count()).where(
    EXPERIMENTS.c.track_id == bindparam("track_id"), EXPERIMENTS.c.id > bindparam("since")
)


def current_best(session: Session, track_id: int = FIRST_TRACK_ID, lock: bool = False) -> TrackState:
    """The track's pins and best: unlocked, cheap enough for every result; `lock` takes the row's
    lock (PostgreSQL; SQLite has one writer anyway), serialising the decisions that move the best
    and the submissions that count from it."""
    statement = _LOCKED_BEST if lock else _CURRENT_BEST
    return TrackState(*session.connection().execute(statement, {"track_id": track_id}).one())


def resolve(session: Session, name: str | None) -> TrackState:
    """The state of the track a request names, or of the only one (`named_or_only`: 404, 422)."""
    return current_best(session, named_or_only(session, name).id)


def move_best(
    session: Session, track_id: int, commit: str, experiment_id: int, since_experiment_id: int, now: datetime
) -> None:
    """Point the track's best at `commit`, the commit of experiment `experiment_id`."""
    session.connection().execute(
        update(TRACKS)
        .where(TRACKS.c.id == track_id)
        .values(
            best_commit=commit,
            best_experiment_id=experiment_id,
            best_since_experiment_id=since_experiment_id,
            updated_at=now,
        )
    )


def best_sample(session: Session, track_id: int = FIRST_TRACK_ID) -> tuple[int, float | None]:
    """The best's valid runs and their mean (0, None before it is measured)."""
    row = session.connection().execute(_BEST_SAMPLE, {"track_id": track_id}).first()
    return (row.valid_runs, row.val_bpb) if row is not None else (0, None)


def submitted_since(session: Session, track_id: int, since_experiment_id: int) -> int:
    """The track's experiments after `since_experiment_id` (ix_experiments_track)."""
    params = {"track_id": track_id, "since": since_experiment_id}
    return int(session.connection().execute(_SUBMITTED_SINCE, params).scalar() or 0)


def last_experiment_id(session: Session) -> int:
    return int(session.scalar(select(func.max(Experiment.id))) or 0)


def add_baseline(session: Session, track: Track, commit: str, blob: str, now: datetime) -> Experiment:
    """Queue a track's baseline experiment (commit `commit`, train.py blob `blob`) and make it the
    track's baseline and best: what `autoresearch init` does for the first track and creating a
    track does for the others."""
    baseline = Experiment(
        track_id=track.id,
        agent_id=None,
        source="baseline",
        description="baseline",
        base_commit=None,
        commit_sha=commit,
        train_py_blob=blob,
        status=ExperimentStatus.QUEUED,
        cancel_requested=False,
        created_at=now,
        queued_at=now,
    )
    session.add(baseline)
    session.flush()
    queue_runs(session, baseline.id, track.id, RunKind.FIRST, now, new=True)
    track.baseline_commit = track.best_commit = commit
    track.best_experiment_id = baseline.id
    track.best_since_experiment_id = baseline.id
    track.updated_at = now
    return baseline


_COUNTS = select(EXPERIMENTS.c.track_id, func.count()).group_by(EXPERIMENTS.c.track_id)
_QUEUED = (
    select(RUNS.c.track_id, func.count()).where(RUNS.c.status == RunState.QUEUED).group_by(RUNS.c.track_id)
)


def counts(session: Session) -> tuple[dict[int, int], dict[int, int]]:
    """Per track: its experiments, and its runs queued."""
    connection = session.connection()
    experiments = {row[0]: int(row[1]) for row in connection.execute(_COUNTS)}
    queued = {row[0]: int(row[1]) for row in connection.execute(_QUEUED)}
    return experiments, queued


def queued_experiments(session: Session, track_id: int) -> list[Experiment]:
    """The track's queued experiments, row-locked."""
    statement = select(Experiment).where(
        Experiment.track_id == track_id, Experiment.status == ExperimentStatus.QUEUED
    )
    return list(session.scalars(statement.with_for_update()))
