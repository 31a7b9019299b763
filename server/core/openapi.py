"""The OpenAPI document as the server answers: every error is application/problem+json.

FastAPI documents errors as `application/json` (and 422 with its own body), while every error
here goes through `server.core.problems`. This rewrites each 4xx and 5xx answer of the generated
document to the problem schema, and documents the 400 that a JSON body which cannot be decoded
(e.g. not UTF-8) gets, so that a client generated from the document parses every answer.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from server.core.problems import PROBLEM_MEDIA_TYPE

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details; `type` ends in a stable kind",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object"}, "description": "validation errors"},
    },
}
_PROBLEM = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}


def _document(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Problem"] = PROBLEM_SCHEMA
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if "application/json" in operation.get("requestBody", {}).get("content", {}):
                responses.setdefault("400", {"description": "the body is not JSON text (e.g. not UTF-8)"})
            for status, response in responses.items():
                if status[0] in "45":
                    response["content"] = _PROBLEM
    return document


def install_openapi(app: FastAPI) -> None:
    """Serve the rewritten document (built once, on the first request for it)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
