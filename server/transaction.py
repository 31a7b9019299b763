"""One write transaction's effects beside its rows: the events it publishes when it commits, and
the git ref changes to undo when it fails (server/context.py, `AppContext.transaction`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from protocol.events import Payload
from server.events import Event


@dataclass
class Transaction:
    session: Session
    events: list[Event] = field(default_factory=list)
    undo: list[Callable[[], None]] = field(default_factory=list)

    def emit(self, payload: Payload) -> None:
        """Publish `payload` as its type's event when the transaction commits; the wire's data is
        the fields set here (protocol/events.py)."""
        self.events.append(Event(payload.TYPE, payload.model_dump(exclude_unset=True)))
