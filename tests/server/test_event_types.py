"""The typed events (protocol/events.py): one payload class per event type, which is its type,
the wire format the server has always sent (the fields the emitter set), and the SDK's parser
reading it back."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session

from protocol.events import (
    DECIDED_EVENTS,
    DECIDED_PAYLOAD,
    PAYLOADS,
    Decided,
    EventType,
    Finished,
    Note,
    Payload,
    Progress,
    Queued,
    Started,
    Summarised,
    parse_stream,
)
from protocol.states import DECIDED_STATUS, Decision, RunState
from server.transaction import Transaction

EXAMPLES: list[Payload] = [
    Queued(experiment_id=3, description="lr 0.02", base="a" * 40, commit="b" * 40),
    Started(experiment_id=3, run=1, attempt=1, worker="gpu0"),
    Progress(experiment_id=3, run=1, attempt=1, step=7, loss=3.5, fraction=0.25),
    Finished(experiment_id=3, run=1, result_status="ok", val_bpb=0.91),
    *(
        decided(experiment_id=3, reason="why", best="c" * 40, val_bpb=None, p_value=0.01)
        for decided in DECIDED_PAYLOAD.values()
    ),
    Note(note_id=1, experiment_id=None, author="agent-1"),
    Summarised(experiment_id=3),
]


def test_every_event_type_has_one_payload_class_which_names_it() -> None:
    assert [payload.TYPE for payload in EXAMPLES] == list(EventType)
    assert all(PAYLOADS[type_].TYPE is type_ for type_ in EventType)
    assert all(type(payload) is PAYLOADS[payload.TYPE] for payload in EXAMPLES)


def test_a_decision_event_is_named_for_the_status_it_leaves() -> None:
    for decision in Decision:
        payload = DECIDED_PAYLOAD[decision]
        assert issubclass(payload, Decided) and payload.TYPE.value == DECIDED_STATUS[decision].value
    assert {payload.TYPE for payload in DECIDED_PAYLOAD.values()} == DECIDED_EVENTS


def test_the_wire_holds_the_fields_the_emitter_set_and_parses_back_to_the_same_payload() -> None:
    # As a transaction emits them: None set on purpose stays (a decision without a comparison).
    tx = Transaction(Session())
    for payload in EXAMPLES:
        tx.emit(payload)
    encoded = [replace(event, id=i) for i, event in enumerate(tx.events, 1)]
    assert encoded[0].data == {
        "experiment_id": 3,
        "description": "lr 0.02",
        "base": "a" * 40,
        "commit": "b" * 40,
    }
    kept = next(event for event in encoded if event.type is EventType.KEPT)
    assert kept.data["val_bpb"] is None and "effect" not in kept.data
    body = ": keepalive\n\n" + "".join(event.encode() for event in encoded)
    body += 'event: from_a_newer_server\ndata: {"x": 1}\n\n'  # skipped, not an error
    parsed = list(parse_stream(iter(body.splitlines())))
    assert [(event.id, event.type) for event in parsed] == [(event.id, event.type) for event in encoded]
    assert [event.payload for event in parsed] == EXAMPLES


def test_a_payload_reads_an_event_with_fields_it_does_not_know() -> None:
    # An older SDK following a newer server.
    finished = Finished.model_validate({"experiment_id": 2, "status": "infra_failed", "added_later": 1})
    assert finished.status == RunState.INFRA_FAILED and not hasattr(finished, "added_later")
