"""RFC 9457 problem+json answers for every error, including FastAPI's own ones.

Handlers raise `Problem`; request validation errors, unknown routes and wrong methods are turned
into the same shape, so that clients parse one error format everywhere.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://autoresearch.invalid/problems/"


class Problem(Exception):
    """An error answer. `kind` becomes the problem type URI's last segment."""

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str,
        *,
        title: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.title = title or kind.replace("-", " ").capitalize()
        self.headers = headers
        self.extra = extra


def unknown_experiment(experiment_id: int) -> Problem:
    return Problem(404, "unknown-experiment", f"no experiment {experiment_id}")


def problem_response(
    status: int,
    kind: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {"type": TYPE_BASE + kind, "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


async def _on_problem(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    return problem_response(exc.status, exc.kind, exc.title, exc.detail, exc.headers, **exc.extra)


async def _on_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "loc": [str(part) for part in error.get("loc", ())],
            "msg": error.get("msg", ""),
            "type": error.get("type", ""),
        }
        for error in exc.errors()
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    detail = f"{'.'.join(first['loc'])}: {first['msg']}" if first["loc"] else str(first["msg"])
    return problem_response(422, "validation-error", "Invalid request", detail, errors=errors)


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path (Starlette's 405 names only one route's)."""
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kinds = {401: "unauthorized", 403: "forbidden", 404: "not-found", 405: "method-not-allowed"}
    kind = kinds.get(exc.status_code, f"http-{exc.status_code}")
    detail = str(exc.detail)
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": _allowed_methods(request)}
    return problem_response(exc.status_code, kind, kind.replace("-", " ").capitalize(), detail, headers)


async def _on_database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    """The database is down, restarting, or dropped the connection: the client should retry."""
    assert isinstance(exc, OperationalError)
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
    detail = f"the database is unavailable ({reason}); retry in a moment"
    return problem_response(503, "database-unavailable", "Database unavailable", detail, {"Retry-After": "1"})


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(OperationalError, _on_database_unavailable)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
