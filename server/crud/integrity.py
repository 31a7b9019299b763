"""Integrity events: a run that ended in an integrity class (protocol.result.INTEGRITY_CLASSES)
holds its agent's queued experiments until an admin clears the event (docs/api.md, "Integrity").

An honest train.py cannot end `non_causal` or `score_over_budget`; a candidate that does tried to
inflate its score. Its own experiment is reverted like any invalid run (server/rules/judge.py); the
event makes a retry cost something: the agent's other undecided experiments are not handed to
workers (HELD_EXPERIMENTS, used by the claim) until an admin has looked at the evidence (the
run's result, kept) and cleared every open event of that agent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, insert, select, update
from sqlalchemy.orm import Session

from protocol.schemas import IntegrityEventOut
from server.crud.experiments import agent_names
from server.crud.tokens import Principal
from server.models import EXPERIMENTS, INTEGRITY_EVENTS, RESULTS, RUNS, utcnow

OPEN = INTEGRITY_EVENTS.c.cleared_at.is_(None)
HELD_AGENTS = select(INTEGRITY_EVENTS.c.agent_id).where(OPEN)
# The undecided experiments of held agents. Runs of decided ones (repeats of a best the agent
# made) still go out: they measure the best, which the event does not change.
HELD_EXPERIMENTS = select(EXPERIMENTS.c.id).where(
    EXPERIMENTS.c.decision.is_(None), EXPERIMENTS.c.agent_id.in_(HELD_AGENTS)
)
_INSERT = insert(INTEGRITY_EVENTS).returning(INTEGRITY_EVENTS.c.id)


class AlreadyCleared(ValueError):
    pass


def record_event(
    connection: Connection, agent_id: int, experiment_id: int, result_id: str, error_class: str, now: datetime
) -> int:
    """Store the event of a recorded result (in the result's transaction); its id."""
    row = {
        "agent_id": agent_id,
        "experiment_id": experiment_id,
        "result_id": result_id,
        "error_class": error_class,
        "created_at": now,
    }
    return int(connection.execute(_INSERT, row).scalar_one())


def open_events(session: Session) -> dict[int, list[int]]:
    """Agent id -> the ids of its events not cleared, oldest first."""
    held: dict[int, list[int]] = {}
    rows = session.execute(
        select(INTEGRITY_EVENTS.c.agent_id, INTEGRITY_EVENTS.c.id).where(OPEN).order_by(INTEGRITY_EVENTS.c.id)
    )
    for agent_id, event_id in rows:
        held.setdefault(agent_id, []).append(event_id)
    return held


_VIEW = (
    select(INTEGRITY_EVENTS, RUNS.c.number, RESULTS.c.error_message)
    .join(RESULTS, RESULTS.c.id == INTEGRITY_EVENTS.c.result_id)
    .join(RUNS, RUNS.c.id == RESULTS.c.run_id)
    .order_by(INTEGRITY_EVENTS.c.id.desc())
)


def list_events(session: Session, open_only: bool, limit: int) -> list[IntegrityEventOut]:
    """The newest `limit` events (only those not cleared, with `open_only`)."""
    statement = _VIEW.where(OPEN) if open_only else _VIEW
    return _views(session, statement.limit(limit))


def clear(session: Session, event_id: int, admin: Principal, note: str) -> IntegrityEventOut:
    """Clear one event (LookupError: no such event; AlreadyCleared: cleared before)."""
    event = session.execute(
        select(INTEGRITY_EVENTS).where(INTEGRITY_EVENTS.c.id == event_id).with_for_update()
    ).first()
    if event is None:
        raise LookupError(f"no integrity event {event_id}")
    if event.cleared_at is not None:
        when = f"{event.cleared_at:%Y-%m-%d %H:%M} UTC"
        raise AlreadyCleared(f"integrity event {event_id} was cleared on {when}")
    session.execute(
        update(INTEGRITY_EVENTS)
        .where(INTEGRITY_EVENTS.c.id == event_id)
        .values(cleared_at=utcnow(), cleared_by=admin.id, clear_note=note)
    )
    (view,) = _views(session, _VIEW.where(INTEGRITY_EVENTS.c.id == event_id))
    return view


def _views(session: Session, statement: Select[Any]) -> list[IntegrityEventOut]:
    rows = session.execute(statement).all()
    names = agent_names(session, {r.agent_id for r in rows} | {r.cleared_by for r in rows if r.cleared_by})
    return [
        IntegrityEventOut(
            id=r.id,
            agent=names.get(r.agent_id, "?"),
            experiment_id=r.experiment_id,
            run=r.number,
            error_class=r.error_class,
            evidence=r.error_message,
            result_id=r.result_id,
            created_at=r.created_at,
            cleared_at=r.cleared_at,
            cleared_by=names.get(r.cleared_by) if r.cleared_by is not None else None,
            clear_note=r.clear_note,
        )
        for r in rows
    ]
