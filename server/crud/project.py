"""The project row: harness id, platform and the current best."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import Project


def load_project(session: Session, lock: bool = False) -> Project:
    """The project; `lock` takes its row lock (PostgreSQL), serialising decisions on `best`.

    A locked read refreshes the row even if this session loaded it before.
    """
    statement = select(Project).where(Project.id == 1)
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.scalars(statement).one()
