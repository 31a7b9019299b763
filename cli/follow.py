"""Follow one experiment live until its decision, from the server's event stream (GET /events).

The stream says when something happened; the experiment itself (GET /experiments/{id}) is the
truth, read on connect and after every decisive event, so nothing is missed between submitting
and subscribing or while reconnecting. A candidate re-based onto a newer best is followed on to
its re-run. A dropped stream is resumed with Last-Event-ID.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from cli import views
from client import ApiError, Client
from client.schemas import ExperimentOut
from client.states import DECIDED_STATUS, FINAL_STATUSES

DECISIVE_EVENTS = frozenset({"finished", *(status.value for status in DECIDED_STATUS.values())})
FOLLOWED_EVENTS = ("queued", "started", "progress", *sorted(DECISIVE_EVENTS))
PROGRESS_EVERY_S = 5.0  # progress arrives about once a second; a line every few seconds is enough
RECONNECT_DELAY_S = 2.0
READ_TIMEOUT_S = 120.0  # the server sends a keepalive comment every SSE_KEEPALIVE_SECONDS (15 s)


@dataclass(frozen=True)
class Event:
    id: int | None
    type: str
    data: dict[str, Any]


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    """Server-sent events from the lines of a text/event-stream body."""
    event_id: int | None = None
    event_type = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield Event(event_id, event_type, json.loads("\n".join(data)))
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


def describe(event: Event) -> str:
    data = event.data
    run = f"run {data['run']} " if data.get("run", 1) != 1 else ""
    if event.type == "started":
        return f"{run}started (attempt {data.get('attempt', '?')})"
    if event.type == "queued":
        if data.get("run", 1) != 1 and not data.get("attempts"):
            return f"{run}queued: {data['why']}"
        return f"{run}queued again ({data['why']})" if data.get("why") else "queued"
    if event.type == "progress":
        parts = [f"{data.get('phase', 'train')}", f"step {data.get('step', 0)}"]
        if data.get("loss") is not None:
            parts.append(f"loss {data['loss']:.4f}")
        parts.append(f"{100 * float(data.get('fraction') or 0):.0f}% of the budget")
        return ", ".join(parts)
    if event.type == "finished":
        status = data.get("result_status") or data.get("status")
        score = f", val_bpb {views.bpb(data['val_bpb'])}" if data.get("val_bpb") is not None else ""
        return f"{run}finished: {status}{score}"
    return event.type


@contextmanager
def _open_stream(client: Client, last_event_id: int | None, read_timeout: float) -> Iterator[httpx.Response]:
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    request = client.http.build_request(
        "GET",
        "/events",
        params={"types": ",".join(FOLLOWED_EVENTS)},
        headers=headers,
        timeout=httpx.Timeout(30.0, read=read_timeout),
    )
    stream = client.http.send(request, stream=True)
    try:
        if stream.status_code != 200:
            stream.read()
            try:
                problem = stream.json()
            except ValueError:
                problem = {"title": stream.reason_phrase, "detail": stream.text[:500]}
            raise ApiError(stream.status_code, problem, "GET", str(stream.url))
        yield stream
    finally:
        stream.close()


def follow(
    client: Client, experiment_id: int, say: Callable[[str], None], timeout_s: float | None = None
) -> ExperimentOut:
    """Report the experiment's progress through `say` and return it in its final state.

    When it was re-based onto a newer best, the re-run is followed and returned instead.
    Raises TimeoutError after `timeout_s` seconds without a decision.
    """
    deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
    current = experiment_id
    last_event_id: int | None = None
    last_progress = 0.0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"experiment {current} has no decision after {timeout_s:.0f} s")
        decisive = False
        try:
            # Subscribed before reading the experiment: whatever happens after this read is streamed.
            with _open_stream(client, last_event_id, min(READ_TIMEOUT_S, max(remaining, 1.0))) as stream:
                experiment = client.experiment(current)
                while experiment.status in FINAL_STATUSES:
                    if not experiment.rebased_to:
                        return experiment
                    say(views.summary(experiment))
                    current = experiment.rebased_to
                    experiment = client.experiment(current)
                for event in parse_events(stream.iter_lines()):
                    last_event_id = event.id if event.id is not None else last_event_id
                    if event.data.get("experiment_id") != current:
                        continue
                    if event.type == "progress":
                        if time.monotonic() - last_progress < PROGRESS_EVERY_S:
                            continue
                        last_progress = time.monotonic()
                    say(f"experiment {current}: {describe(event)}")
                    if event.type in DECISIVE_EVENTS:
                        decisive = True
                        break
        except httpx.TransportError as error:
            if time.monotonic() < deadline:
                say(f"(event stream interrupted: {error or type(error).__name__}; reconnecting)")
        if not decisive:
            time.sleep(min(RECONNECT_DELAY_S, max(deadline - time.monotonic(), 0.0)))
