"""The workers' rows: who registered which worker, and when each was last seen."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session

from server.core.problems import Problem
from server.crud.tokens import Principal
from server.models import Worker


def named(session: Session, principal: Principal, name: str) -> Worker | None:
    """The caller's worker of this name, if it registered one before."""
    return session.scalars(select(Worker).where(Worker.token_id == principal.id, Worker.name == name)).first()


def refuse_taken_name(session: Session, principal: Principal, name: str) -> None:
    """A worker's name belongs to the token that registered it first: pages and events name workers,
    so another token must not run under it (registrations are serialised by the tracks' locks)."""
    taken = session.scalar(select(Worker.id).where(Worker.name == name, Worker.token_id != principal.id))
    if taken is not None:
        raise Problem(
            409,
            "worker-name-taken",
            f"another worker token already registered a worker named {name!r}; choose another name",
        )


def _online(since: datetime) -> ColumnElement[bool]:
    """Workers seen (register, claim or heartbeat) since `since`, and accepted by a track."""
    return and_(Worker.last_seen_at >= since, Worker.refused.is_(None))


def online_count(session: Session, since: datetime) -> int:
    return int(session.scalar(select(func.count()).where(_online(since))) or 0)


def online(session: Session, since: datetime) -> list[Worker]:
    return list(session.scalars(select(Worker).where(_online(since))))
