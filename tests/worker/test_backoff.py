"""Backoff delays and the retry loop used for every call to the server."""

from __future__ import annotations

import logging
import random
import threading

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from client import ApiError
from worker.backoff import Backoff, Stopped, is_transient, retry

log = logging.getLogger("test.backoff")


@given(
    base=st.floats(0.001, 10.0),
    cap=st.floats(0.001, 100.0),
    seed=st.integers(0, 2**32),
    attempts=st.integers(1, 40),
)
def test_delays_grow_exponentially_within_jitter_and_cap(
    base: float, cap: float, seed: int, attempts: int
) -> None:
    backoff = Backoff(base=base, cap=cap, rng=random.Random(seed))
    for n in range(attempts):
        ceiling = min(cap, base * 2.0**n)
        assert ceiling / 2 <= backoff.next_delay() <= ceiling
    backoff.reset()
    assert min(cap, base) / 2 <= backoff.next_delay() <= min(cap, base)


def test_jitter_spreads_workers_apart() -> None:
    delays = {Backoff(base=1.0, rng=random.Random(seed)).next_delay() for seed in range(20)}
    assert len(delays) == 20


def problem(status: int) -> ApiError:
    return ApiError(status, {"type": "about:blank", "title": "t", "status": status, "detail": "d"})


def test_transient_errors() -> None:
    assert is_transient(httpx.ConnectError("refused"))
    assert is_transient(httpx.ReadTimeout("slow"))
    assert is_transient(problem(503))
    assert not is_transient(problem(409))
    assert not is_transient(problem(422))
    assert not is_transient(ValueError("bug"))


def test_retry_until_success_logs_what_it_waits_for(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise httpx.ConnectError("connection refused")
        return "answer"

    with caplog.at_level(logging.INFO):
        value = retry(flaky, "the server to register", threading.Event(), log, Backoff(base=0.001))
    assert value == "answer"
    assert len(calls) == 4
    waits = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(waits) == 3
    assert all("waiting for the server to register" in w and "connection refused" in w for w in waits)


def test_retry_raises_permanent_errors_at_once() -> None:
    calls = []

    def refused() -> None:
        calls.append(1)
        raise problem(409)

    with pytest.raises(ApiError):
        retry(refused, "x", threading.Event(), log, Backoff(base=0.001))
    assert len(calls) == 1


def test_retry_stops_waiting_when_told_to() -> None:
    stop = threading.Event()

    def down() -> None:
        stop.set()  # e.g. SIGTERM arrives while the server is away
        raise httpx.ConnectError("refused")

    with pytest.raises(Stopped):
        retry(down, "x", stop, log, Backoff(base=60.0))
