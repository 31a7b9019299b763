"""The server's events (GET /events), each type defined once with its payload.

The server emits them (server/transaction.py `Transaction.emit`, after the commit) and the SDK
reads them (`Client.events`), both through these classes: a payload class is its event type
(`TYPE`), so an event cannot carry another type's payload. The wire format is the payload's
fields that the emitter set, as JSON. Decisions' events are named for the status they leave the
experiment in (kept, reverted, rebased, stale). Payloads ignore fields they do not know, so that
an older SDK can follow a newer server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from protocol.result import ProgressEvent, ResultStatus
from protocol.states import Decision, ExperimentStatus, RunState


class EventType(StrEnum):
    QUEUED = "queued"  # an experiment, or another run of one, waits for a worker
    STARTED = "started"  # a worker claimed a run
    PROGRESS = "progress"  # a run's latest progress sample (about once a second)
    FINISHED = "finished"  # a run's result was recorded, or an experiment ended without a decision
    KEPT = ExperimentStatus.KEPT.value
    REVERTED = ExperimentStatus.REVERTED.value
    REBASED = ExperimentStatus.REBASED.value
    STALE = ExperimentStatus.STALE.value
    NOTE = "note"  # a note was posted
    SUMMARISED = "summarised"  # a decided experiment's change was summarised (keep rates count it)


class Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    TYPE: ClassVar[EventType]


class Queued(Payload):
    TYPE = EventType.QUEUED
    experiment_id: int
    run: int | None = None  # another run of the experiment (a confirmation, a repeat, a requeue)
    attempts: int | None = None  # the run's attempts so far, when it was queued again
    why: str | None = None
    description: str | None = None  # a new experiment: what it changes,
    base: str | None = None  # the commit it was applied to,
    commit: str | None = None  # and its own commit
    track: str | None = None  # the track it is queued on (the server says it; older servers did not)


class Started(Payload):
    TYPE = EventType.STARTED
    experiment_id: int
    run: int
    attempt: int
    worker: str | None


class Progress(ProgressEvent, Payload):
    TYPE = EventType.PROGRESS
    experiment_id: int
    run: int | None
    attempt: int


class Finished(Payload):
    """A run's result was recorded (`run`, `result_status`, `val_bpb`), or the experiment ended
    without a decision (`status` cancelled or infra_failed, `reason`)."""

    TYPE = EventType.FINISHED
    experiment_id: int
    run: int | None = None
    result_status: ResultStatus | None = None
    val_bpb: float | None = None
    status: ExperimentStatus | RunState | None = None
    reason: str | None = None


class Decided(Payload):
    """Kept, reverted, rebased or stale (the subclass, which is the event's type); the comparison
    when there was one."""

    experiment_id: int
    reason: str
    best: str | None  # the best commit after the decision
    rebased_to: int | None = None  # the re-run of a rebased experiment
    val_bpb: float | None = None
    effect: float | None = None
    se: float | None = None
    p_value: float | None = None


class Note(Payload):
    TYPE = EventType.NOTE
    note_id: int
    experiment_id: int | None
    author: str


class Summarised(Payload):
    TYPE = EventType.SUMMARISED
    experiment_id: int


class Kept(Decided):
    TYPE = EventType.KEPT


class Reverted(Decided):
    TYPE = EventType.REVERTED


class Rebased(Decided):
    TYPE = EventType.REBASED


class Stale(Decided):
    TYPE = EventType.STALE


# Named for the status the decision leaves the experiment in (protocol/states.py, DECIDED_STATUS).
DECIDED_PAYLOAD: dict[Decision, type[Decided]] = {
    Decision.KEEP: Kept,
    Decision.REVERT: Reverted,
    Decision.REBASE: Rebased,
    Decision.STALE: Stale,
}
DECIDED_EVENTS = frozenset(payload.TYPE for payload in DECIDED_PAYLOAD.values())
PAYLOADS: dict[EventType, type[Payload]] = {
    payload.TYPE: payload
    for payload in (Queued, Started, Progress, Finished, Kept, Reverted, Rebased, Stale, Note, Summarised)
}


_TYPE_NAMES = frozenset(member.value for member in EventType)


@dataclass(frozen=True)
class ServerEvent:
    id: int | None  # for Last-Event-ID, to resume after a dropped stream
    type: EventType
    payload: Payload


def parse_stream(lines: Iterator[str]) -> Iterator[ServerEvent]:
    """Events from the lines of a text/event-stream body (comments and unknown types skipped)."""
    event_id: int | None = None
    event_type = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data and event_type in _TYPE_NAMES:
                known = EventType(event_type)
                yield ServerEvent(
                    event_id, known, PAYLOADS[known].model_validate(json.loads("\n".join(data)))
                )
            event_type, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id" and value.isdigit():
            event_id = int(value)
        elif name == "event":
            event_type = value
        elif name == "data":
            data.append(value)
