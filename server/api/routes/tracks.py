"""Tracks (list; admins create and archive them), and the transfer view across tracks."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from protocol.schemas import TRACK_PATTERN, TrackIn, TrackOut, TracksOut, TransferOut
from server import history
from server.api.deps import Admin, Ctx, Reader, Responses
from server.flows import tracks

router = APIRouter(tags=["tracks"])
_AUTH: Responses = {401: {"description": "reads need a token (PUBLIC_READS=false)"}}
_ADMIN: Responses = {401: {"description": "no token"}, 403: {"description": "not an admin"}}
TrackName = Annotated[str, Path(pattern=TRACK_PATTERN, description="the track's name")]


@router.get("/tracks", responses=_AUTH)
def list_tracks(ctx: Ctx, _reader: Reader) -> TracksOut:
    """Every track (the first first): its preset, platforms and pins, best, experiments, queued
    runs and the workers online that serve it."""
    return tracks.listed(ctx)


@router.post(
    "/tracks",
    status_code=201,
    responses={
        **_ADMIN,
        409: {"description": "a track of this name exists"},
        413: {"description": "the baseline train.py over the size limit"},
        422: {"description": "a bad name, an unknown preset, or a baseline train.py the limits refuse"},
    },
)
async def create_track(ctx: Ctx, admin: Admin, body: TrackIn) -> TrackOut:
    """Create a track (admin): its baseline (the first track's train.py and program.md unless
    given) is queued at once for the workers it accepts."""
    return await run_in_threadpool(tracks.create, ctx, admin, body)


@router.post("/tracks/{name}/archive", responses={**_ADMIN, 404: {"description": "no such track"}})
def archive_track(ctx: Ctx, admin: Admin, name: TrackName) -> TrackOut:
    """Archive a track (admin): it takes no new experiments, no worker serves it, and its queued
    experiments are cancelled; its history stays readable."""
    return tracks.archive(ctx, admin, name)


@router.get("/transfer", responses=_AUTH)
def get_transfer(ctx: Ctx, _reader: Reader, limit: Annotated[int, Query(ge=1, le=500)] = 100) -> TransferOut:
    """Every change tried on more than one track (the same lines removed and added), newest first,
    with its effect ± se and decision on each track."""
    with ctx.db.read() as session:
        return history.transfer_view(session, limit)
