"""What history says before an agent proposes: near misses and keep rates by kind of change."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from protocol.schemas import KeepRatesOut, NearMissesOut
from server import history
from server.api.deps import Ctx, Reader, Responses
from server.api.params import KeepRatesQuery, NearMissesQuery
from server.crud.tracks import resolve

router = APIRouter(tags=["history"])
_AUTH: Responses = {
    401: {"description": "reads need a token (PUBLIC_READS=false)"},
    404: {"description": "no such track"},
    422: {"description": "a bad parameter, or no track named where there are several"},
}


@router.get("/near-misses", responses=_AUTH)
def get_near_misses(ctx: Ctx, _reader: Reader, query: Annotated[NearMissesQuery, Query()]) -> NearMissesOut:
    """Reverted experiments that measured a gain short of significance, strongest evidence first:
    candidates to combine (docs/api.md, "Near misses")."""
    with ctx.db.read() as session:
        return history.near_miss_list(session, ctx.repo, resolve(session, query.track), query.limit)


@router.get("/keep-rates", responses=_AUTH)
def get_keep_rates(ctx: Ctx, _reader: Reader, query: Annotated[KeepRatesQuery, Query()]) -> KeepRatesOut:
    """What was tried and what was kept, per constant (and the way it moved) and per region of
    train.py, over the decided experiments of a track on its platform and harness (docs/api.md,
    "Keep rates")."""
    with ctx.db.read() as session:
        return history.keep_rate_table(
            session,
            resolve(session, query.track),
            part=query.part,
            name=query.name,
            min_tried=query.min_tried,
            limit=query.limit,
        )
