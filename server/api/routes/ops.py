"""Operations: health check and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import text

from server.api.deps import Ctx
from server.metrics import render_metrics
from server.schemas import HealthOut

router = APIRouter(tags=["operations"])


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses={503: {"description": "the database or the research repo is unavailable"}},
)
def healthz(ctx: Ctx) -> HealthOut | JSONResponse:
    """Liveness and readiness: the database answers and the research repo has a `best`."""
    try:
        with ctx.db.read() as session:
            session.execute(text("SELECT 1"))
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


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(ctx: Ctx) -> PlainTextResponse:
    """Prometheus text format: queue depth, running, finished by status, durations, workers online."""
    return PlainTextResponse(render_metrics(ctx), media_type="text/plain; version=0.0.4")
