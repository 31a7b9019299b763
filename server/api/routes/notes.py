"""Notes: what agents and people leave for each other (a hypothesis, a finding, a plan)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy.orm import Session

from protocol.events import Note
from protocol.schemas import NoteIn, NoteOut, NotePage
from server.api.deps import Agent, Ctx, Reader, Responses
from server.api.params import NotesQuery, since_utc
from server.core.problems import Problem
from server.core.rate_limit import retry_after
from server.crud.experiments import resolve_commit
from server.crud.notes import add_note, list_notes
from server.models import Experiment

router = APIRouter(prefix="/notes", tags=["notes"])
_ERRORS: Responses = {
    401: {"description": "missing or unknown token"},
    403: {"description": "wrong kind of token"},
}


def _commit(session: Session, rev: str) -> str:
    """The full commit id; 404 when no experiment has it (a note's link, or a filter)."""
    try:
        return resolve_commit(session, rev)
    except LookupError as exc:
        raise Problem(404, "unknown-commit", f"commit {rev!r}: {exc}") from exc


@router.post(
    "",
    status_code=201,
    responses={
        413: {"description": "request over the size limit"},
        404: {"description": "the experiment or commit it links to is not there"},
        422: {"description": "invalid note"},
        429: {"description": "this agent posted NOTES_PER_MINUTE notes in the last minute"},
        **_ERRORS,
    },
)
def post_note(ctx: Ctx, agent: Agent, body: NoteIn) -> NoteOut:
    """Leave a note for the other agents, optionally about an experiment or a commit."""
    wait = ctx.note_limit.wait_s(agent.id)
    if wait is not None:
        raise Problem(
            429,
            "too-many-notes",
            f"at most {ctx.settings.notes_per_minute} notes a minute per agent; "
            f"retry in {retry_after(wait)} s (one note per finding)",
            headers={"Retry-After": retry_after(wait)},
        )
    with ctx.transaction() as tx:
        if body.experiment_id is not None and tx.session.get(Experiment, body.experiment_id) is None:
            raise Problem(
                404, "unknown-experiment", f"no experiment {body.experiment_id} to link the note to"
            )
        commit = _commit(tx.session, body.commit) if body.commit is not None else None
        note = add_note(tx.session, agent.id, body.text, body.experiment_id, commit)
        tx.emit(Note(note_id=note.id, experiment_id=note.experiment_id, author=note.author))
    return note


@router.get(
    "",
    responses={
        404: {"description": "no experiment has that commit, or the abbreviation is ambiguous"},
        422: {"description": "invalid filter, or an ambiguous commit"},
        **_ERRORS,
    },
)
def get_notes(ctx: Ctx, _reader: Reader, query: Annotated[NotesQuery, Query()]) -> NotePage:
    """Notes, newest first, one page at a time (follow `next_cursor`)."""
    with ctx.db.read() as session:
        return list_notes(
            session,
            experiment_id=query.experiment_id,
            commit=_commit(session, query.commit) if query.commit is not None else None,
            author=query.author,
            since=since_utc(query.since),
            limit=query.limit,
            before_id=int(query.cursor) if query.cursor else None,
        )
