"""Tracks, as the admin keeps them: create one (its baseline queued), archive one, list them.

A new track starts from a baseline of its own: a parentless commit of the first track's baseline
train.py and program.md unless the admin gives others (the train.py held to the limits a
submission is), on its own best branch (research_repo.best_branch). Creating or archiving a track
changes which tracks workers serve, so their cached tracks are computed again (`tracks_version`).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy.exc import IntegrityError

from harness.config import PRESETS
from protocol.events import Finished, Queued
from protocol.schemas import TrackIn, TrackOut, TracksOut
from protocol.states import ExperimentStatus
from server.context import AppContext
from server.core.problems import Problem
from server.crud import tracks as crud
from server.crud import workers as workers_crud
from server.crud.runs import cancel_queued_runs
from server.crud.tokens import Principal
from server.crud.tracks import offer_of, pins_of
from server.models import FIRST_TRACK_ID, Track, utcnow
from server.rules.lifecycle import move_experiment
from server.rules.tracks import refusal
from server.trainpy.limits import refusal as train_py_refusal
from server.trainpy.research_repo import best_branch, blob_sha

log = logging.getLogger(__name__)


def view(track: Track, experiments: int, queued: int, workers: int) -> TrackOut:
    return TrackOut(
        name=track.name,
        preset=track.preset,
        platforms=track.platforms,
        platform=track.platform,
        harness_id=track.harness_id,
        branch=best_branch(track.id == FIRST_TRACK_ID, track.name),
        baseline=track.baseline_commit,
        best=track.best_commit,
        best_experiment_id=track.best_experiment_id,
        experiments=experiments,
        queued=queued,
        workers=workers,
        created_at=track.created_at,
        archived_at=track.archived_at,
    )


def listed(ctx: AppContext) -> TracksOut:
    """Every track with its counts and the workers online that serve it."""
    since = utcnow() - timedelta(seconds=2 * ctx.settings.lease_seconds)
    with ctx.db.read() as session:
        tracks = crud.all_tracks(session)
        experiments, queued = crud.counts(session)
        online = workers_crud.online(session, since)
        serving = {t.id: sum(refusal(pins_of(t), offer_of(w)) is None for w in online) for t in tracks}
        return TracksOut(
            tracks=[view(t, experiments.get(t.id, 0), queued.get(t.id, 0), serving[t.id]) for t in tracks]
        )


def one(ctx: AppContext, name: str) -> TrackOut:
    return next(t for t in listed(ctx).tracks if t.name == name)


def create(ctx: AppContext, admin: Principal, body: TrackIn) -> TrackOut:
    """A new track with its baseline queued; 409 when the name is taken, 422 for a preset that
    does not exist or a baseline train.py the limits refuse."""
    if body.preset is not None and body.preset not in PRESETS:
        raise Problem(
            422, "unknown-preset", f"preset {body.preset!r} is not one of {', '.join(sorted(PRESETS))}"
        )
    if body.train_py is not None:
        refused = train_py_refusal(body.train_py, ctx.settings.train_py_limits)
        if refused is not None:
            raise Problem(refused.status, refused.kind, f"the baseline {refused.detail}")
    with ctx.db.read() as session:
        if crud.by_name(session, body.name) is not None:
            raise _taken(body.name)
        first = crud.load_track(session)
    assert first.baseline_commit is not None  # the server starts only on an initialised project
    train_py = (
        body.train_py.encode() if body.train_py is not None else ctx.repo.train_py(first.baseline_commit)
    )
    program_md = (
        body.program_md.encode()
        if body.program_md is not None
        else ctx.repo.program_md(first.baseline_commit)
    )
    commit = ctx.repo.baseline(train_py, program_md, f"Baseline of track {body.name}\n")
    branch = best_branch(False, body.name)
    try:
        with ctx.transaction() as tx:
            now = utcnow()
            track = Track(
                name=body.name,
                preset=body.preset,
                platforms=body.platforms,
                platform=body.platform,
                harness_id=body.harness_id,
                created_at=now,
                updated_at=now,
            )
            tx.session.add(track)
            tx.session.flush()
            baseline = crud.add_baseline(tx.session, track, commit, blob_sha(train_py), now)
            ctx.repo.set_experiment_ref(baseline.id, commit)
            tx.undo.append(lambda: ctx.repo.delete_experiment_ref(baseline.id))
            ctx.repo.set_best(commit, branch)
            tx.undo.append(lambda: ctx.repo.delete_best(branch))
            tx.emit(Queued(experiment_id=baseline.id, description="baseline", commit=commit, track=body.name))
    except IntegrityError as exc:  # created by another request meanwhile
        raise _taken(body.name) from exc
    ctx.tracks_changed()
    log.info("track %s created by %s", body.name, admin.name)
    return one(ctx, body.name)


def _taken(name: str) -> Problem:
    return Problem(409, "track-exists", f"a track named {name!r} exists already; choose another name")


def archive(ctx: AppContext, admin: Principal, name: str) -> TrackOut:
    """Archive a track: no new experiments, no worker serves it, its queued experiments are
    cancelled (a running one finishes and is decided). Archiving it again changes nothing."""
    with ctx.transaction() as tx:
        track = crud.by_name(tx.session, name)
        if track is None:
            raise Problem(404, "unknown-track", f"no track named {name!r}")
        if track.archived_at is None:
            now = utcnow()
            track.archived_at = track.updated_at = now
            reason = f"cancelled while queued: track {name} was archived by {admin.name}"
            for experiment in crud.queued_experiments(tx.session, track.id):
                move_experiment(experiment, ExperimentStatus.CANCELLED)
                experiment.finished_at, experiment.decision_reason = now, reason
                cancel_queued_runs(tx.session, experiment.id, now)
                tx.emit(
                    Finished(experiment_id=experiment.id, status=ExperimentStatus.CANCELLED, reason=reason)
                )
    ctx.tracks_changed()
    return one(ctx, name)
