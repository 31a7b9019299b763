"""Query parameters, each defined once with its checks: those that several routes take, and the
listing routes' parameters as pydantic models. A route takes a model as a FastAPI query model
(`Annotated[ExperimentsQuery, Query()]`); the MCP tool that mirrors the route takes the model's
fields as its inputs (server/mcp/tools.py), so both have the same names, limits and descriptions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Query
from pydantic import BaseModel, Field

from protocol.schemas import PAGE_LIMIT, SHA_PATTERN, STATES_NUL_FREE, TRACK_PATTERN
from protocol.states import ExperimentStatus, Part
from server.core.problems import Problem

# RFC 3339 date-times, which have a time zone (a number, which pydantic would read as a Unix time,
# or a naive time is refused).
_RFC3339 = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_CURSOR = {"pattern": r"^[1-9][0-9]{0,17}$", "description": "next_cursor of the previous page"}

Since = Annotated[
    str | None,
    Field(
        pattern=_RFC3339,
        json_schema_extra={"format": "date-time"},
        description="only those created at or after this time, e.g. 2025-01-01T00:00:00Z",
    ),
]
Cursor = Annotated[str | None, Query(**_CURSOR)]
AgentName = Annotated[
    str | None, Field(max_length=100, json_schema_extra=STATES_NUL_FREE, description="an agent's name")
]
PageCursor = Annotated[str | None, Field(**_CURSOR)]
_TRACK = {"pattern": TRACK_PATTERN}  # docs/api.md: default, the only track
TrackField = Annotated[str | None, Field(**_TRACK)]
TrackQuery = Annotated[str | None, Query(**_TRACK)]


class ExperimentsQuery(BaseModel):
    """GET /experiments; the MCP tool `search`."""

    track: Annotated[
        str | None, Field(pattern=TRACK_PATTERN, description="only this track's (default: all)")
    ] = None
    status: ExperimentStatus | None = None
    agent: AgentName = None
    base: Annotated[str | None, Field(pattern=r"^[0-9a-fA-F]{40}$", description="full commit id")] = None
    since: Since = None
    text: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            json_schema_extra=STATES_NUL_FREE,
            description="words the description or hypothesis contains",
        ),
    ] = None
    constant: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            json_schema_extra=STATES_NUL_FREE,
            description="a constant the change set: its name; for a knob its path, its last part "
            "(`width`) or a path above it (`DEVICE_SETTINGS`)",
        ),
    ] = None
    line: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            pattern=r"^[^\x00]*[^\s\x00][^\x00]*$",
            description="text one of the changed lines contains (case-sensitive, whitespace collapsed)",
        ),
    ] = None
    limit: Annotated[int, Field(ge=1, le=PAGE_LIMIT)] = 50
    cursor: PageCursor = None


class NotesQuery(BaseModel):
    """GET /notes; the MCP tool `notes`."""

    experiment_id: Annotated[int | None, Field(ge=1, le=2**62, description="notes about this experiment")] = (
        None
    )
    commit: Annotated[
        str | None, Field(pattern=SHA_PATTERN, description="notes about this commit (full or abbreviated)")
    ] = None
    author: AgentName = None
    since: Since = None
    limit: Annotated[int, Field(ge=1, le=PAGE_LIMIT)] = 50
    cursor: PageCursor = None


class NearMissesQuery(BaseModel):
    """GET /near-misses; the MCP tool `near_misses`."""

    track: TrackField = None
    limit: Annotated[int, Field(ge=1, le=100)] = 20


class IntegrityQuery(BaseModel):
    """GET /integrity-events."""

    open: bool = Field(False, description="only the events not cleared (those that hold an agent)")
    limit: Annotated[int, Field(ge=1, le=PAGE_LIMIT)] = 50


class KeepRatesQuery(BaseModel):
    """GET /keep-rates; the MCP tool `keep_rates`."""

    track: TrackField = None
    part: Annotated[Part | None, Field(description="constant or region (default: both)")] = None
    name: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            json_schema_extra=STATES_NUL_FREE,
            description="a constant or region",
        ),
    ] = None
    min_tried: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


def since_utc(since: str | None) -> datetime | None:
    """A `Since` value as an aware UTC datetime; a 422 problem for a date that does not exist or
    leaves the datetime range once converted to UTC."""
    if since is None:
        return None
    try:
        return datetime.fromisoformat(since).astimezone(UTC)
    except ValueError as exc:
        raise Problem(422, "bad-datetime", f"`since`: {exc}") from exc
    except OverflowError as exc:  # e.g. 9999-12-31T23:59:59-23:59 is past the last datetime in UTC
        raise Problem(422, "since-out-of-range", "`since` is out of range once converted to UTC") from exc
