"""Operations: health check and Prometheus metrics.

`/healthz` answers without a token whatever PUBLIC_READS says (load balancers and orchestrators
probe it; it tells nothing about the project). `/metrics` describes the project's activity, so
with PUBLIC_READS=false it needs a token like every other read.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from protocol.schemas import HealthOut
from server.api.deps import Ctx, Reader
from server.metrics import render_metrics

router = APIRouter(tags=["operations"])


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses={503: {"description": "the database or the research repo is unavailable"}},
)
def healthz(ctx: Ctx) -> HealthOut | JSONResponse:
    """Liveness and readiness: the database answers and the research repo has a `best`."""
    try:
        ctx.db.ping()
        database = "ok"
    except Exception as exc:  # report, don't crash: this is what the check is for
        database = f"error: {type(exc).__name__}"
    try:
        ctx.repo.best()
        repo = "ok"
    except Exception as exc:
        repo = f"error: {type(exc).__name__}"
    if database != "ok" or repo != "ok":
        return JSONResponse(
            {"status": "unavailable", "database": database, "research_repo": repo},
            status_code=503,
        )
    return HealthOut(status="ok", database=database, research_repo=repo)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={401: {"description": "reads need a token (PUBLIC_READS=false)"}},
)
def metrics(request: Request, _reader: Reader) -> PlainTextResponse:
    """Prometheus text format: queue depth, running, finished by status, durations, workers online."""
    return PlainTextResponse(render_metrics(request.app.state.metrics), media_type=CONTENT_TYPE_PLAIN_0_0_4)
