"""Ports: a kept change of one track carried to another, to be decided there on its own runs.

Does a finding on one GPU hold on another? The change (the diff from the kept experiment's base
to its commit) is applied to the other track's best exactly as a rebase applies a change
(server/trainpy/carry.py: exact context, the train.py limits), and queued there as a new experiment of
the caller's (`source: port`, `ported_from`: the kept one). It starts with no evidence: its
runs on the other track alone decide it (its origin's runs were on other hardware, or another
preset), and the transfer view (server/rules/transfer.py) sets its effect beside its origin's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from protocol.schemas import PortIn
from protocol.states import ExperimentStatus
from server.context import AppContext
from server.core.problems import Problem, unknown_experiment
from server.crud.experiments import get_view
from server.crud.similar import find_same_train_py, similar_earlier
from server.crud.tokens import Principal
from server.crud.tracks import TrackRef, current_best, load_track, named_or_only
from server.flows.candidates import Candidate, commit_message, queue_submission
from server.flows.decisions import queue_best_repeats
from server.flows.submit import SubmitOutcome
from server.models import Experiment
from server.trainpy.carry import carried

TRIES = 3  # the target's best moved while the change was carried: carried again onto the new one


@dataclass(frozen=True)
class Port:
    """What carrying a kept change to a track starts from."""

    experiment_id: int
    base: str  # the kept experiment's base and commit: its change
    commit: str
    description: str
    hypothesis: str | None
    message: str  # the commit message on the target track
    track: TrackRef  # the target
    best: str  # the target's best as read


def port(ctx: AppContext, principal: Principal, experiment_id: int, body: PortIn) -> SubmitOutcome:
    """Queue experiment `experiment_id`'s change on track `body.track`; the experiment with that
    train.py there if there is one (created False). 404 unknown experiment or track, 409 when it
    is not kept, the track is archived or the change does not apply there, 422 for its own track."""
    for _ in range(TRIES):
        outcome = _queued(ctx, principal, _read(ctx, experiment_id, body))
        if outcome is not None:
            break
    else:
        raise Problem(
            409,
            "best-moving",
            f"the best of track {body.track} kept moving while the change was carried; try again",
            headers={"Retry-After": "5"},
        )
    with ctx.db.read() as session:
        return replace(
            outcome,
            view=get_view(session, outcome.experiment_id),
            similar=similar_earlier(session, outcome.experiment_id, None),
        )


def _read(ctx: AppContext, experiment_id: int, body: PortIn) -> Port:
    with ctx.db.read() as session:
        origin = session.get(Experiment, experiment_id)
        if origin is None:
            raise unknown_experiment(experiment_id)
        if origin.status != ExperimentStatus.KEPT or origin.base_commit is None:
            what = "a baseline, which changes nothing" if origin.base_commit is None else origin.status
            raise Problem(
                409,
                "not-kept",
                f"experiment {experiment_id} is {what}: only a kept change is ported to another track",
            )
        target = named_or_only(session, body.track)
        if target.id == origin.track_id:
            raise Problem(422, "same-track", f"experiment {experiment_id} is of track {target.name} already")
        if target.archived_at is not None:
            raise Problem(
                409, "track-archived", f"track {target.name} is archived: it takes no new experiments"
            )
        assert target.best_commit is not None
        description = body.description or origin.description
        source = load_track(session, origin.track_id).name
        message = commit_message(description, origin.hypothesis)
        return Port(
            experiment_id=experiment_id,
            base=origin.base_commit,
            commit=origin.commit_sha,
            description=description,
            hypothesis=origin.hypothesis,
            message=f"{message}\nPorted from experiment {experiment_id} of track {source}.\n",
            track=TrackRef(target.id, target.name),
            best=target.best_commit,
        )


def _queued(ctx: AppContext, principal: Principal, port: Port) -> SubmitOutcome | None:
    """The port queued (or its twin found); None when the target's best moved meanwhile."""
    limits = ctx.settings.train_py_limits
    carry = carried(ctx.repo, port.base, port.commit, port.best, port.message, principal.name, limits)
    if carry.stale is not None:
        raise Problem(
            409,
            "port-does-not-apply",
            f"experiment {port.experiment_id}'s change onto the best of track {port.track.name}: "
            f"{carry.stale}",
        )
    assert carry.change is not None
    with ctx.db.read() as session:
        existing = find_same_train_py(session, carry.blob, port.track.id)
    if existing is not None:
        return SubmitOutcome(existing, created=False)
    with ctx.transaction() as tx:
        state = current_best(tx.session, port.track.id, lock=True)
        if state.best_commit != port.best:
            return None
        candidate = Candidate(
            port.description, port.hypothesis, port.best, carry.commit, carry.blob, carry.change
        )
        queued, created = queue_submission(
            ctx, tx, principal, candidate, port.track, ported_from_id=port.experiment_id
        )
        if created:
            queue_best_repeats(ctx, tx.session, state)
    return SubmitOutcome(queued, created)
