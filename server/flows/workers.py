"""Worker registration: which tracks accept the worker (pinning what they had no pin for).

A worker serves every track that accepts its device, harness id and preset (server/rules/tracks.py).
Registration records it either way: one that no track accepts is answered 409 with every track's
reason, and the workers page shows that reason. A claim uses the tracks computed here, again after
the admin created or archived a track (`serving`).
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from protocol.schemas import RegisterIn, RegisterOut
from server.context import AppContext
from server.core.problems import Problem
from server.crud import workers
from server.crud.tokens import Principal
from server.crud.tracks import all_tracks, offer_of, pins_of
from server.harness_pin import pin
from server.models import Track, Worker, utcnow
from server.presence import Serving
from server.rules.tracks import Refusal, refusal

log = logging.getLogger(__name__)


def accept(worker: Worker, tracks: list[Track]) -> tuple[list[Track], list[Refusal]]:
    """The tracks (row-locked by the caller: registrations are serialised) that accept the worker,
    each pinned to its device and harness where it had no pin yet, and why each other track does
    not."""
    accepted, refused = [], []
    offer = offer_of(worker)
    for track in tracks:
        why = refusal(pins_of(track), offer)
        if why is None:
            for field in pin(track, offer.harness_id, offer.device):
                log.info("worker %s pins track %s's %s", worker.name, track.name, field)
            accepted.append(track)
        else:
            refused.append(why)
    worker.refused = None if accepted else "; ".join(r.detail for r in refused) or "there is no track"
    return accepted, refused


def register(ctx: AppContext, principal: Principal, body: RegisterIn) -> RegisterOut:
    version = ctx.tracks_version
    with ctx.transaction() as tx:
        tracks = all_tracks(tx.session, lock=True)
        now = utcnow()
        worker = workers.named(tx.session, principal, body.name)
        if worker is None:
            workers.refuse_taken_name(tx.session, principal, body.name)
            worker = Worker(id=str(uuid.uuid4()), token_id=principal.id, name=body.name, registered_at=now)
            tx.session.add(worker)
        worker.device = body.device
        worker.memory_gb = body.memory_gb
        worker.harness_id = body.harness_id
        worker.preset = body.preset
        worker.last_seen_at = now
        accepted, refused = accept(worker, tracks)
        serving = Serving(tuple(t.id for t in accepted), frozenset(t.name for t in accepted))
        answer = RegisterOut(
            worker_id=worker.id,
            harness_id=body.harness_id,
            platform=body.device,
            lease_seconds=ctx.settings.lease_seconds,
            heartbeat_seconds=ctx.settings.lease_seconds / 3,
            tracks=sorted(serving.names),
        )
    if not accepted:  # recorded as refused (the workers page says why), then told why
        raise not_accepted(refused)
    ctx.presence.remember(answer.worker_id, principal.id, body.name)
    ctx.presence.serve(answer.worker_id, version, serving)
    return answer


def not_accepted(refused: list[Refusal]) -> Problem:
    """A worker no track accepts: a 409 that says why. With one track its reason's own kind
    (harness-mismatch, platform-mismatch...), as before there were tracks; else `no-track`."""
    advice = {
        "harness-mismatch": "Run the worker with the track's preset and data settings, and the "
        "installation's DATA_SECRET where this host prepared its own data (the secret draws the "
        "validation sample); results of different harnesses are never compared",
        "platform-mismatch": "Results from different platforms are never compared: an admin can create a "
        "track for this platform (autoresearch track create)",
        "preset-mismatch": "Run the worker with a track's preset, or create a track for this preset",
        "track-archived": "Create a track for this worker (autoresearch track create)",
    }
    if len(refused) == 1:
        (only,) = refused
        return Problem(409, only.kind, f"{only.detail}. {advice[only.kind]}", tracks=[only.detail])
    reasons = "; ".join(r.detail for r in refused) or "this server has no track"
    return Problem(
        409,
        "no-track",
        f"no track accepts this worker: {reasons}. An admin can create a track for it "
        "(autoresearch track create --platforms ... --preset ...)",
        tracks=[r.detail for r in refused],
    )


def serving(ctx: AppContext, worker_id: str) -> Serving:
    """The tracks the worker serves: known since its registration, or computed again (and pinned)
    after the tracks changed. 409 when no track accepts it any more."""
    version = ctx.tracks_version
    known = ctx.presence.serving(worker_id, version)
    if known is not None:
        return known
    with ctx.transaction() as tx:
        tracks = all_tracks(tx.session, lock=True)
        worker = tx.session.get(Worker, worker_id)
        assert worker is not None  # checked by the caller (check_worker)
        accepted, refused = accept(worker, tracks)
    if not accepted:
        raise not_accepted(refused)
    found = Serving(tuple(t.id for t in accepted), frozenset(t.name for t in accepted))
    ctx.presence.serve(worker_id, version, found)
    return found


def online(ctx: AppContext) -> int:
    """Workers seen (register, claim or heartbeat) within two lease periods, and accepted by a track."""
    since = utcnow() - timedelta(seconds=2 * ctx.settings.lease_seconds)
    with ctx.db.read() as session:
        return workers.online_count(session, since)
