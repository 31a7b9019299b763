"""Refuse a NUL character in a request's path or query string (422 problem+json) before routing.

PostgreSQL cannot store or even compare a text value with NUL in it (psycopg raises DataError),
so no path or query value may carry one into a query. Checking the URL here covers every route,
page and parameter at once; JSON bodies are checked by the request models (`protocol.schemas`),
and HTTP parsers refuse a NUL in a header.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from server.core.problems import problem_response


class RefuseNul:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # `path` is percent-decoded by the server; the query string is raw bytes.
            in_path = "\0" in scope["path"]
            query: bytes = scope.get("query_string", b"")
            if in_path or b"%00" in query or b"\0" in query:
                where = "path" if in_path else "query"
                detail = f"the {where} contains a NUL character (%00), which no value may contain"
                errors = [{"loc": [where], "msg": "must not contain NUL characters", "type": "value_error"}]
                response = problem_response(422, "validation-error", "Invalid request", detail, errors=errors)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
