"""POST /experiments: validate a change of train.py, commit it on its base, and queue it.

Order matters for locks: the candidate commit is written first (repo lock only), then one
database transaction re-checks duplicates and the agent's queue limit and inserts the row (with
the track's row locked on PostgreSQL, the whole database on SQLite), so that concurrent submits
cannot exceed limits or queue the same train.py twice on a track. What it answers (the
experiment's view and the earlier experiments similar to it) is read after that transaction
commits: statements under the track lock make every other submission wait (on PostgreSQL each is
a round trip). Lock order everywhere: a track's row, then experiments' rows, then runs'.

The track: the one the request names, else the base's, else the only one (crud/tracks.py,
`named_or_only`); a base must be a commit of the track it is submitted to.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace

from sqlalchemy.orm import Session

from protocol.schemas import ExperimentOut, SimilarExperiment, SimilarIn, SubmitIn
from server.context import AppContext
from server.core.problems import Problem
from server.crud.experiments import by_commit, get_view, resolve_commit
from server.crud.similar import find_same_train_py, similar_earlier
from server.crud.tokens import Principal
from server.crud.tracks import TrackRef, current_best, load_track, named_or_only
from server.flows.candidates import Candidate, commit_message, queue_submission
from server.flows.decisions import queue_best_repeats
from server.models import IdempotencyKey
from server.rules.similarity import Change
from server.trainpy.changes import summarize
from server.trainpy.edits import EditError, apply_edits
from server.trainpy.limits import refusal
from server.trainpy.patches import PatchError, apply_patch, parse_patch
from server.trainpy.research_repo import blob_sha

_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


@dataclass(frozen=True)
class SubmitOutcome:
    experiment_id: int
    created: bool  # False: an existing experiment (same train.py, or a repeated Idempotency-Key)
    view: ExperimentOut | None = None  # what POST /experiments answers
    similar: list[SimilarExperiment] = field(default_factory=list)  # earlier, most alike first
    # Queued by this request: its change and train.py blob, so that its similar experiments are
    # found from them rather than from its rows read back.
    queued: tuple[Change, str] | None = None


@dataclass(frozen=True)
class Proposed:
    """A change of train.py that passed the checks: its track and base, and the source before and
    after."""

    track: TrackRef
    base: str
    base_source: str
    new_source: str

    @property
    def change(self) -> Change:
        return Change(summarize(self.base_source, self.new_source), self.base)


def propose(ctx: AppContext, session: Session, body: SubmitIn | SimilarIn) -> Proposed:
    """Check a change as a submission is checked (track, base, patch or file, sizes); Problem if bad."""
    track, base = _track_and_base(session, body.track, body.base)
    try:
        base_source = ctx.repo.train_py(base).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem(422, "base-not-text", f"train.py of base {base} is not UTF-8 text") from exc
    return Proposed(track, base, base_source, _new_train_py(ctx, body, base_source))


def _request_sha256(body: SubmitIn) -> str:
    return hashlib.sha256(json.dumps(body.model_dump(), sort_keys=True).encode()).hexdigest()


def _replayed(session: Session, principal: Principal, key: str, request_sha: str) -> SubmitOutcome | None:
    stored = session.get(IdempotencyKey, (principal.id, key))
    if stored is None:
        return None
    if stored.request_sha256 != request_sha:
        raise Problem(
            422,
            "idempotency-key-reused",
            f"Idempotency-Key {key!r} was used for a different request; use a new key per submission",
        )
    return SubmitOutcome(stored.experiment_id, created=stored.status_code == 201)


def _track_and_base(session: Session, name: str | None, base: str | None) -> tuple[TrackRef, str]:
    """The track a change goes to and the commit it is made on: `base`, else the track's best."""
    if base is None:
        track = named_or_only(session, name)
        if track.best_commit is None:
            raise Problem(409, "not-initialised", "the project has no baseline yet; run `autoresearch init`")
        return _open(track.id, track.name, track.archived_at is not None), track.best_commit
    try:
        commit = resolve_commit(session, base)
    except LookupError as exc:
        raise Problem(
            404,
            "unknown-base",
            f"base {base!r}: {exc}; use the commit of an experiment or of the best (REST: GET /experiments, "
            "GET /best; MCP: search, best)",
        ) from exc
    own = by_commit(session, commit)
    assert own is not None  # resolve_commit found an experiment with this commit
    track = load_track(session, own.track_id) if name is None else named_or_only(session, name)
    if own.track_id != track.id:
        other = load_track(session, own.track_id).name
        raise Problem(
            422,
            "base-on-another-track",
            f"base {commit[:12]} is a commit of track {other}, not of track {track.name}: submit the change "
            f"to track {other}, or port a kept experiment to {track.name} (POST /experiments/{{id}}/port)",
        )
    return _open(track.id, track.name, track.archived_at is not None), commit


def _open(track_id: int, name: str, archived: bool) -> TrackRef:
    """The track, unless it is archived (409 track-archived: it takes no new experiments)."""
    if archived:
        raise Problem(409, "track-archived", f"track {name} is archived: it takes no new experiments")
    return TrackRef(track_id, name)


def _new_train_py(ctx: AppContext, body: SubmitIn | SimilarIn, base_source: str) -> str:
    settings = ctx.settings
    if sum(form is not None for form in (body.patch, body.train_py, body.edits)) != 1:
        raise Problem(
            422,
            "patch-or-train-py",
            "send exactly one of `patch` (a unified diff), `train_py` (the whole file) or `edits` "
            "(search/replace pairs)",
        )
    if body.edits is not None:
        size = sum(len(e.old.encode()) + len(e.new.encode()) for e in body.edits)
        if size > settings.patch_max_bytes:
            raise Problem(
                413, "patch-too-large", f"the edits are {size} bytes; the limit is {settings.patch_max_bytes}"
            )
        try:
            new = apply_edits(base_source, body.edits)
        except EditError as exc:
            raise Problem(422, exc.kind, exc.detail) from exc
    elif body.patch is not None:
        size = len(body.patch.encode())
        if size > settings.patch_max_bytes:
            raise Problem(
                413, "patch-too-large", f"patch is {size} bytes; the limit is {settings.patch_max_bytes}"
            )
        try:
            new = apply_patch(base_source, parse_patch(body.patch))
        except PatchError as exc:
            raise Problem(422, exc.kind, exc.detail) from exc
    else:
        assert body.train_py is not None
        new = body.train_py
    refused = refusal(new, settings.train_py_limits)
    if refused is not None:
        raise Problem(refused.status, refused.kind, f"the new {refused.detail}")
    if new == base_source:
        raise Problem(422, "empty-change", "the change leaves train.py exactly as it is in the base")
    return new


def submit(
    ctx: AppContext, principal: Principal, body: SubmitIn, idempotency_key: str | None
) -> SubmitOutcome:
    request_sha = _request_sha256(body)
    if idempotency_key is not None and not _IDEMPOTENCY_KEY.match(idempotency_key):
        raise Problem(422, "bad-idempotency-key", "Idempotency-Key must be 1-200 printable ASCII characters")
    # An earlier answer: the same Idempotency-Key, or (without a key) the same train.py.
    with ctx.db.read() as session:  # one read session for all the checks (each costs round trips)
        outcome = _replayed(session, principal, idempotency_key, request_sha) if idempotency_key else None
        if outcome is None:
            proposed = propose(ctx, session, body)
            new_source = proposed.new_source.encode()
            blob = blob_sha(new_source)
            existing = find_same_train_py(session, blob, proposed.track.id)
            if existing is not None and idempotency_key is None:
                outcome = SubmitOutcome(existing, created=False)
    if outcome is None:
        # Summarized before the transaction: it takes milliseconds, and the project is locked in it.
        change = proposed.change
        commit = ctx.repo.commit_candidate(
            proposed.base, new_source, commit_message(body.description, body.hypothesis), principal.name
        )
        with ctx.transaction() as tx:
            track = current_best(tx.session, proposed.track.id, lock=True)  # serialises submissions
            if idempotency_key is not None:
                outcome = _replayed(tx.session, principal, idempotency_key, request_sha)
            if outcome is None:
                candidate = Candidate(
                    body.description, body.hypothesis, change.base, commit, blob, change.summary
                )
                experiment_id, created = queue_submission(ctx, tx, principal, candidate, proposed.track)
                if created:
                    queue_best_repeats(ctx, tx.session, track)
                outcome = SubmitOutcome(experiment_id, created, queued=(change, blob) if created else None)
                if idempotency_key is not None:
                    tx.session.add(
                        IdempotencyKey(
                            token_id=principal.id,
                            key=idempotency_key,
                            request_sha256=request_sha,
                            experiment_id=experiment_id,
                            status_code=201 if created else 200,
                        )
                    )
    # The answer is read after the commit, not under the track lock (which serialises submits),
    # in one session for both parts.
    with ctx.db.read() as session:
        return replace(
            outcome,
            view=get_view(session, outcome.experiment_id),
            similar=similar_earlier(session, outcome.experiment_id, outcome.queued),
        )
