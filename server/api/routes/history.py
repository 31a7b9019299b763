"""What history says before an agent proposes: near misses and keep rates by kind of change."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from server.api.deps import Ctx, Reader
from server.crud import history
from server.keep_rates import Part
from server.near_misses import DEFAULT_SIGMAS, MAX_SIGMAS
from server.schemas import KeepRatesOut, NearMissesOut

router = APIRouter(tags=["history"])
_AUTH = {401: {"description": "reads need a token (PUBLIC_READS=false)"}}

Sigmas = Annotated[
    float,
    Query(
        gt=0,
        le=MAX_SIGMAS,
        description="k: a near miss's effect - k * se is below zero (within k standard errors of "
        "its reference, or better)",
    ),
]


@router.get("/near-misses", responses=_AUTH)
def get_near_misses(
    ctx: Ctx,
    _reader: Reader,
    sigmas: Sigmas = DEFAULT_SIGMAS,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> NearMissesOut:
    """Reverted experiments that may still be better than what they were measured against, most
    promising first: candidates to combine (docs/api.md, "Near misses")."""
    with ctx.db.read() as session:
        return history.near_miss_list(session, ctx.repo, sigmas, limit)


@router.get("/keep-rates", responses=_AUTH)
def get_keep_rates(
    ctx: Ctx,
    _reader: Reader,
    part: Part | None = None,
    name: Annotated[
        str | None, Query(min_length=1, max_length=200, description="a constant or region")
    ] = None,
    min_tried: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> KeepRatesOut:
    """What was tried and what was kept, per constant (and the way it moved) and per region of
    train.py, over the decided experiments of the project's platform and harness (docs/api.md,
    "Keep rates")."""
    with ctx.db.read() as session:
        return history.keep_rate_table(session, part=part, name=name, min_tried=min_tried, limit=limit)
