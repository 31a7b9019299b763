"""The REST API's OpenAPI document, built from its routers alone (no database, no server)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from server.api.router import ROUTERS


def openapi() -> dict[str, Any]:
    app = FastAPI()
    for router in ROUTERS:
        app.include_router(router)
    return app.openapi()
