"""GET /events: server-sent events of the queue and decisions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from protocol.events import EventType
from server.api.deps import Ctx, Reader
from server.core.problems import Problem
from server.events import TooManySubscribers

router = APIRouter(tags=["events"])
# A refused subscriber retries after this long: streams end when their clients leave.
_RETRY_AFTER_S = 10
_TYPE = "(" + "|".join(EventType) + ")"
_TYPES_PATTERN = f"^{_TYPE}(,{_TYPE})*$"


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "an endless event stream"},
        503: {"description": "too many event streams open, in all or from this client (see Retry-After)"},
    },
)
async def events(
    request: Request,
    ctx: Ctx,
    reader: Reader,
    types: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=_TYPES_PATTERN,
            description=f"comma-separated subset of: {', '.join(EventType)}",
        ),
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
) -> StreamingResponse:
    """Queued, started, progress, finished, kept, reverted, rebased and stale events, as they happen.

    Reconnect with `Last-Event-ID` to receive what was missed (from a bounded in-memory buffer).
    """
    # The pattern allows known types only.
    wanted = frozenset(EventType(name) for name in types.split(",")) if types else frozenset(EventType)
    resume = int(last_event_id) if last_event_id and last_event_id.isdigit() else None
    # Per client: a token is one client wherever it connects from; without one, an address is.
    client = (
        f"token:{reader.id}"
        if reader is not None
        else f"address:{request.client.host if request.client else ''}"
    )
    try:
        subscriber = ctx.bus.subscribe(wanted, resume, client)
    except TooManySubscribers as exc:
        raise Problem(
            503, "too-many-streams", f"{exc}; retry later", headers={"Retry-After": str(_RETRY_AFTER_S)}
        ) from exc
    keepalive = ctx.settings.sse_keepalive_seconds

    async def stream() -> AsyncIterator[str]:
        try:
            yield "retry: 3000\n\n"
            while not await request.is_disconnected():
                try:
                    event = await asyncio.wait_for(subscriber.queue.get(), keepalive)
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if event is None:  # this client fell too far behind; it reconnects and resumes
                    return
                yield event.encode()
        finally:
            ctx.bus.unsubscribe(subscriber)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)
