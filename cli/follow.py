"""Follow one experiment live until its decision, from the server's event stream (GET /events).

The stream says when something happened; the experiment itself (GET /experiments/{id}) is the
truth, read on connect and after every decisive event, so nothing is missed between submitting
and subscribing or while reconnecting. A candidate re-based onto a newer best is followed on to
its re-run. A dropped stream is resumed with Last-Event-ID.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import httpx

from cli import views
from client import Client
from protocol.events import DECIDED_EVENTS, EventType, Finished, Progress, Queued, ServerEvent, Started
from protocol.schemas import ExperimentOut
from protocol.states import FINAL_STATUSES

DECISIVE_EVENTS = frozenset({EventType.FINISHED, *DECIDED_EVENTS})
FOLLOWED_EVENTS = (EventType.QUEUED, EventType.STARTED, EventType.PROGRESS, *sorted(DECISIVE_EVENTS))
PROGRESS_EVERY_S = 5.0  # progress arrives about once a second; a line every few seconds is enough
RECONNECT_DELAY_S = 2.0
READ_TIMEOUT_S = 120.0  # the server sends a keepalive comment every SSE_KEEPALIVE_SECONDS (15 s)


def describe(event: ServerEvent) -> str:
    payload = event.payload
    number = getattr(payload, "run", None)
    run = f"run {number} " if number not in (None, 1) else ""
    if isinstance(payload, Started):
        return f"{run}started (attempt {payload.attempt})"
    if isinstance(payload, Queued):
        if run and not payload.attempts:
            return f"{run}queued: {payload.why}"
        return f"{run}queued again ({payload.why})" if payload.why else "queued"
    if isinstance(payload, Progress):
        return views.progress(payload)
    if isinstance(payload, Finished):
        status = payload.result_status or payload.status
        score = f", val_bpb {views.bpb(payload.val_bpb)}" if payload.val_bpb is not None else ""
        return f"{run}finished: {status}{score}"
    return event.type


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
            read_timeout = min(READ_TIMEOUT_S, max(remaining, 1.0))
            with client.events(FOLLOWED_EVENTS, last_event_id, read_timeout) as events:
                experiment = client.experiment(current)
                while experiment.status in FINAL_STATUSES:
                    if not experiment.rebased_to:
                        return experiment
                    say(views.summary(experiment))
                    current = experiment.rebased_to
                    experiment = client.experiment(current)
                for event in events:
                    last_event_id = event.id if event.id is not None else last_event_id
                    if getattr(event.payload, "experiment_id", None) != current:
                        continue
                    if event.type is EventType.PROGRESS:
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
