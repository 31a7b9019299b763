"""The API's routers, in the order server.main includes them under /api/v1."""

from fastapi import APIRouter

from server.api.routes import (
    events,
    experiments,
    history,
    integrity,
    notes,
    ops,
    project,
    similar,
    tracks,
    tsv,
    worker,
)

ROUTERS: tuple[APIRouter, ...] = (
    experiments.router,
    notes.router,
    worker.router,
    project.router,
    events.router,
    tsv.router,
    ops.router,
    similar.router,
    history.router,  # near misses and keep rates
    integrity.router,
    tracks.router,  # tracks and the transfer view
)
