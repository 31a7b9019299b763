"""Worker registration, which also pins the project's harness id and platform."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from client.schemas import RegisterIn, RegisterOut
from server.context import AppContext
from server.core.problems import Problem
from server.crud import workers
from server.crud.project import load_project
from server.crud.tokens import Principal
from server.harness_pin import ProjectMismatch, pin
from server.models import Worker, utcnow

log = logging.getLogger(__name__)


def register(ctx: AppContext, principal: Principal, body: RegisterIn) -> RegisterOut:
    with ctx.transaction() as tx:
        project = load_project(tx.session, lock=True)
        try:
            pinned = pin(project, body.harness_id, body.device)
        except ProjectMismatch as mismatch:
            raise _refused(mismatch) from mismatch
        if "harness_id" in pinned:
            log.warning(
                "no HARNESS_ID and no prepared data: worker %s fixes the harness id to %s",
                body.name,
                body.harness_id,
            )
        if "platform" in pinned:
            log.info("worker %s fixes the project's platform to %s", body.name, body.device)
        now = utcnow()
        worker = workers.named(tx.session, principal, body.name)
        if worker is None:
            workers.refuse_taken_name(tx.session, principal, body.name)
            worker = Worker(id=str(uuid.uuid4()), token_id=principal.id, name=body.name, registered_at=now)
            tx.session.add(worker)
        worker.device = body.device
        worker.memory_gb = body.memory_gb
        worker.harness_id = body.harness_id
        worker.last_seen_at = now
        answer = RegisterOut(
            worker_id=worker.id,
            harness_id=project.harness_id,
            platform=project.platform,
            lease_seconds=ctx.settings.lease_seconds,
            heartbeat_seconds=ctx.settings.lease_seconds / 3,
        )
    ctx.presence.remember(answer.worker_id, principal.id, body.name)
    return answer


def _refused(mismatch: ProjectMismatch) -> Problem:
    """A worker whose harness or device is not the project's: a 409 that says what to do."""
    if mismatch.field == "harness_id":
        return Problem(
            409,
            "harness-mismatch",
            f"this server's project uses harness {mismatch.pinned}; the worker's harness is "
            f"{mismatch.offered}. Run the worker with the server's preset and data settings, and the "
            "installation's DATA_SECRET where this host prepared its own data (the secret draws the "
            "validation sample); results of different harnesses are never compared",
            project_harness_id=mismatch.pinned,
        )
    return Problem(
        409,
        "platform-mismatch",
        f"this server's project measures on {mismatch.pinned!r}; the worker's device is "
        f"{mismatch.offered!r}. Results from different platforms are never compared: run a separate "
        "server for this platform",
        project_platform=mismatch.pinned,
    )


def online(ctx: AppContext) -> int:
    """Workers seen (register, claim or heartbeat) within two lease periods."""
    since = utcnow() - timedelta(seconds=2 * ctx.settings.lease_seconds)
    with ctx.db.read() as session:
        return workers.online_count(session, since)
