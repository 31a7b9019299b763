"""The worker protocol (worker tokens only); see docs/api.md."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from protocol.schemas import (
    STATES_NUL_FREE,
    ClaimIn,
    ClaimOut,
    HeartbeatOut,
    ProgressIn,
    RegisterIn,
    RegisterOut,
    ReleaseIn,
    ResultIn,
    ResultOutcome,
)
from server.api.deps import Ctx, Responses, WorkerToken
from server.flows import leases
from server.flows.results import record_result
from server.flows.workers import register

router = APIRouter(prefix="/worker", tags=["worker"])
LeaseId = Annotated[str, Path(min_length=1, max_length=36, json_schema_extra=STATES_NUL_FREE)]
_AUTH: Responses = {
    401: {"description": "missing or unknown token"},
    403: {"description": "not a worker token"},
}
_HELD: Responses = {
    **_AUTH,
    404: {"description": "no such lease for this token"},
    409: {"description": "lease no longer held"},
}
# The lease endpoints are what a fleet calls most. They are `async` and send only the database
# work to a thread of their own small pool (`ctx.in_worker_thread`): a plain `def` endpoint takes
# a second thread hop to validate its answer.


@router.post(
    "/register",
    responses={
        **_AUTH,
        409: {
            "description": "no track accepts the worker (harness id, platform or preset), or the name "
            "belongs to another token"
        },
    },
)
def register_worker(ctx: Ctx, worker: WorkerToken, body: RegisterIn) -> RegisterOut:
    """Register (or re-register) a worker: the tracks it serves (each pins its harness id and platform
    on first use); 409 with every track's reason when none accepts it."""
    return register(ctx, worker, body)


@router.post(
    "/claim",
    response_model=ClaimOut,
    responses={
        **_AUTH,
        204: {"description": "nothing to run within wait_s"},
        404: {"description": "unknown worker"},
        409: {"description": "no track accepts the worker any more (a track was archived)"},
    },
)
async def claim(ctx: Ctx, worker: WorkerToken, body: ClaimIn) -> ClaimOut | Response:
    """Lease the next queued experiment; waits up to `wait_s` seconds for one (long poll).

    `progress_seconds`: how often to send progress, scaled to the fleet (server/fleet.py).
    """
    fleet = ctx.fleet
    deadline, slot = fleet.start_long_poll(min(body.wait_s, ctx.settings.claim_max_wait_s))
    try:
        while True:
            # The tracks it serves, once known (a claim computes them: server/flows/workers.py).
            tracks = ctx.presence.serving(body.worker_id, ctx.tracks_version)
            if tracks is None or not fleet.known_empty(ctx.bus.queued_events, tracks.names):
                claimed = await ctx.in_worker_thread(leases.claim, ctx, worker, body.worker_id)
                if claimed is not None:
                    claimed.progress_seconds = fleet.progress_seconds()
                    return claimed
                tracks = ctx.presence.serving(body.worker_id, ctx.tracks_version)
            # Woken by a "queued" event of this process for one of its tracks, or by the look at
            # the queue once a second that serves all waiting claims (server/fleet.py).
            remaining = deadline - fleet.clock()
            names = tracks.names if tracks is not None else None
            if remaining <= 0 or not await ctx.bus.wait_for_queued(remaining, names):
                return Response(status_code=204)
    finally:
        fleet.end_long_poll(slot)


@router.post("/leases/{lease_id}/heartbeat", responses=_HELD)
async def heartbeat(ctx: Ctx, worker: WorkerToken, lease_id: LeaseId) -> HeartbeatOut:
    """Renew the lease; `cancel` asks the worker to stop the run and release the lease.

    `progress_seconds`: how often to send progress, scaled to the fleet (server/fleet.py).
    """
    answer = await ctx.in_worker_thread(leases.heartbeat, ctx, worker, lease_id)
    answer.progress_seconds = ctx.fleet.progress_seconds()
    return answer


@router.post("/leases/{lease_id}/progress", status_code=204, responses=_HELD)
async def progress(ctx: Ctx, worker: WorkerToken, lease_id: LeaseId, body: ProgressIn) -> Response:
    """Live progress samples of the run."""
    await ctx.in_worker_thread(leases.record_progress, ctx, worker, lease_id, body.events)
    return Response(status_code=204)


@router.post("/leases/{lease_id}/result", responses=_HELD)
async def result(ctx: Ctx, worker: WorkerToken, lease_id: LeaseId, body: ResultIn) -> ResultOutcome:
    """Record the run's result and decide keep/revert; the same result_id again gets the same answer."""
    return await ctx.in_worker_thread(record_result, ctx, worker, lease_id, body)


@router.post("/leases/{lease_id}/release", status_code=204, responses=_HELD)
def release(ctx: Ctx, worker: WorkerToken, lease_id: LeaseId, body: ReleaseIn) -> Response:
    """Give the experiment back to the queue; the attempt counts only with `count_attempt`."""
    leases.release(ctx, worker, lease_id, body.reason, body.count_attempt)
    return Response(status_code=204)
