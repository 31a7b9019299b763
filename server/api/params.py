"""Query parameters that several routes take, each defined once with its checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Query

from server.core.problems import Problem

# RFC 3339 date-times, which have a time zone (a number, which pydantic would read as a Unix time,
# or a naive time is refused).
_RFC3339 = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)

Since = Annotated[
    str | None,
    Query(
        pattern=_RFC3339,
        json_schema_extra={"format": "date-time"},
        description="only those created at or after this time, e.g. 2025-01-01T00:00:00Z",
    ),
]
Cursor = Annotated[
    str | None, Query(pattern=r"^[1-9][0-9]{0,17}$", description="next_cursor of the previous page")
]


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
