"""Integrity events: runs that ended in an integrity class, and an admin clearing them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from protocol.schemas import ClearIn, IntegrityEventOut, IntegrityEventsOut
from server.api.deps import Admin, Ctx, Reader, Responses
from server.api.params import IntegrityQuery
from server.core.problems import Problem
from server.crud import integrity

router = APIRouter(prefix="/integrity-events", tags=["integrity"])
_AUTH: Responses = {401: {"description": "missing or unknown token"}}


@router.get("", responses=_AUTH)
def get_integrity_events(
    ctx: Ctx, _reader: Reader, query: Annotated[IntegrityQuery, Query()]
) -> IntegrityEventsOut:
    """Runs that ended `non_causal` or `score_over_budget`, newest first, with their evidence; an
    agent with one not cleared has its queued experiments held (docs/api.md, "Integrity")."""
    with ctx.db.read() as session:
        return IntegrityEventsOut(items=integrity.list_events(session, query.open, query.limit))


@router.post(
    "/{event_id}/clear",
    responses={
        403: {"description": "not an admin token"},
        404: {"description": "no such event"},
        409: {"description": "cleared before"},
        **_AUTH,
    },
)
def clear_integrity_event(
    ctx: Ctx, admin: Admin, event_id: Annotated[int, Path(ge=1, le=2**62)], body: ClearIn
) -> IntegrityEventOut:
    """Clear an event once its evidence was looked at (admin only); the agent's queued experiments
    run again when none of its events is open."""
    with ctx.transaction() as tx:
        try:
            return integrity.clear(tx.session, event_id, admin, body.note)
        except LookupError as exc:
            raise Problem(404, "unknown-integrity-event", str(exc)) from exc
        except integrity.AlreadyCleared as exc:
            raise Problem(409, "already-cleared", str(exc)) from exc
