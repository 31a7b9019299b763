"""The typed events (client/events.py): one payload class per event type, the wire format the
server has always sent (the fields the emitter set), and the SDK's parser reading it back."""

from __future__ import annotations

import itertools

import pytest

from client.events import (
    DECIDED_EVENT,
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
    check_payload,
    parse_stream,
)
from client.states import DECIDED_STATUS, Decision, ExperimentStatus, RunState
from server.events import Event

EXAMPLES: dict[EventType, Payload] = {
    EventType.QUEUED: Queued(experiment_id=3, description="lr 0.02", base="a" * 40, commit="b" * 40),
    EventType.STARTED: Started(experiment_id=3, run=1, attempt=1, worker="gpu0"),
    EventType.PROGRESS: Progress(experiment_id=3, run=1, attempt=1, step=7, loss=3.5, fraction=0.25),
    EventType.FINISHED: Finished(experiment_id=3, run=1, result_status="ok", val_bpb=0.91),
    **{
        event: Decided(experiment_id=3, reason="why", best="c" * 40, val_bpb=None, p_value=0.01)
        for event in DECIDED_EVENT.values()
    },
    EventType.NOTE: Note(note_id=1, experiment_id=None, author="agent-1"),
    EventType.SUMMARISED: Summarised(experiment_id=3),
}


def test_every_event_type_has_one_payload_class_and_refuses_the_others() -> None:
    assert set(PAYLOADS) == set(EventType) == set(EXAMPLES)
    for type_, payload in itertools.product(EventType, EXAMPLES.values()):
        if type(payload) is PAYLOADS[type_]:
            check_payload(type_, payload)
        else:
            with pytest.raises(TypeError, match=f"a {type_} event carries"):
                check_payload(type_, payload)


def test_a_decision_event_is_named_for_the_status_it_leaves() -> None:
    for decision in Decision:
        assert DECIDED_EVENT[decision].value == DECIDED_STATUS[decision].value
    assert ExperimentStatus.KEPT.value == EventType.KEPT.value


def test_the_wire_holds_the_fields_the_emitter_set_and_parses_back_to_the_same_payload() -> None:
    # As Tx.emit encodes them: None set on purpose stays (a decision without a comparison).
    encoded = [Event(type_, payload.model_dump(exclude_unset=True), i) for i, (type_, payload) in
               enumerate(EXAMPLES.items(), 1)]  # fmt: skip
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
    assert [event.payload for event in parsed] == list(EXAMPLES.values())


def test_a_payload_reads_an_event_with_fields_it_does_not_know() -> None:
    # An older SDK following a newer server.
    finished = Finished.model_validate({"experiment_id": 2, "status": "infra_failed", "added_later": 1})
    assert finished.status == RunState.INFRA_FAILED and not hasattr(finished, "added_later")
