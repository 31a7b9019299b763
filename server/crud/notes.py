"""Notes: writing one, and reading them newest first with filters (GET /notes, the pages, MCP)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from protocol.schemas import NoteOut, NotePage
from server.crud.experiments import agent_names
from server.models import ApiToken, Note


def add_note(
    session: Session, author_id: int, text: str, experiment_id: int | None, commit: str | None
) -> NoteOut:
    """Store a note whose links were checked by the caller; its view."""
    note = Note(author_id=author_id, text=text, experiment_id=experiment_id, commit_sha=commit)
    session.add(note)
    session.flush()
    return note_views(session, [note])[0]


def note_views(session: Session, notes: list[Note]) -> list[NoteOut]:
    names = agent_names(session, {n.author_id for n in notes})
    return [
        NoteOut(
            id=n.id,
            author=names.get(n.author_id, "?"),
            text=n.text,
            experiment_id=n.experiment_id,
            commit=n.commit_sha,
            created_at=n.created_at,
        )
        for n in notes
    ]


def list_notes(
    session: Session,
    *,
    experiment_id: int | None = None,
    commit: str | None = None,
    author: str | None = None,
    since: datetime | None = None,
    limit: int = 50,
    before_id: int | None = None,
) -> NotePage:
    """Newest first; `before_id` is the cursor (the last id of the previous page)."""
    statement = select(Note).order_by(Note.id.desc()).limit(limit + 1)
    if experiment_id is not None:
        statement = statement.where(Note.experiment_id == experiment_id)
    if commit is not None:
        statement = statement.where(Note.commit_sha == commit)
    if author is not None:
        statement = statement.where(Note.author_id.in_(select(ApiToken.id).where(ApiToken.name == author)))
    if since is not None:
        statement = statement.where(Note.created_at >= since)
    if before_id is not None:
        statement = statement.where(Note.id < before_id)
    rows = list(session.scalars(statement))
    page, more = rows[:limit], len(rows) > limit
    return NotePage(items=note_views(session, page), next_cursor=str(page[-1].id) if more else None)
