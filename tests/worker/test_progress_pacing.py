"""A worker sends its progress as often as the server says (server/fleet.py), a few events a call."""

from __future__ import annotations

import itertools
import re

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.result import ProgressEvent
from protocol.spread import spread
from testkit.processes import Project

PROGRESS_ROUTE = "/api/v1/worker/leases/{lease_id}/progress"


def progress_requests(project: Project) -> int:
    """How many progress requests the server answered (its own request count, GET /metrics)."""
    text = httpx.get(f"{project.url}/api/v1/metrics", timeout=10).text
    pattern = rf'_count\{{method="POST",route="{re.escape(PROGRESS_ROUTE)}"\}} (\d+)'
    found = re.search(pattern, text)
    return int(found[1]) if found else 0


# One worker online and 0.25 progress requests a second for the fleet: every 4 s, once the
# server has counted the worker (every 5 s); before that, every second.
@pytest.mark.parametrize("project", [{"time_budget": 20, "fleet_progress_per_s": 0.25}], indirect=True)
def test_the_worker_sends_progress_at_the_pace_the_server_sets(project: Project) -> None:
    project.worker("paced")
    finished = project.final(1)
    assert finished.result.status in {"ok", "over_budget"}, finished.result
    run_seconds = finished.run_seconds
    sent = progress_requests(project)
    # Every second, that would be one request a second; at most 5 s of that, then one every 4 s.
    assert 1 <= sent <= 5 + run_seconds / 4 + 1, f"{sent} progress requests in {run_seconds:.0f} s"
    assert project.progress(1)  # the samples arrived, batched


@given(st.integers(0, 400), st.integers(1, 40))
def test_a_progress_call_carries_at_most_a_few_events_spread_over_the_batch(length: int, most: int) -> None:
    events = [ProgressEvent(step=step, fraction=0.5) for step in range(length)]
    sent = spread(events, most)
    steps = [event.step for event in sent]
    assert len(sent) == min(length, most)
    assert steps == sorted(set(steps))  # in order, none twice
    if events:
        assert sent[-1] is events[-1]  # the newest is always shown
    if len(sent) >= 2 and length > most:
        assert sent[0] is events[0]
        gaps = [b - a for a, b in itertools.pairwise(steps)]
        assert max(gaps) - min(gaps) <= 1  # evenly spread
