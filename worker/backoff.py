"""Retrying calls to the server: exponential backoff with jitter, and clear log lines while waiting.

Workers run on many machines against one server; when the server restarts they must not all
come back in the same instant, so every delay is randomised ("equal jitter": half fixed, half
random, which keeps a floor so a flapping server is not hammered).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception

from client import ApiError

T = TypeVar("T")

# Statuses that say "try again later" rather than "this request is wrong".
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class Stopped(Exception):
    """Raised by `retry` when the stop event was set while it waited to try again."""


@dataclass
class Backoff:
    """Delays base, 2*base, 4*base... capped at `cap`, each drawn from [d/2, d]."""

    base: float = 0.5
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * 2.0**self.attempt)
        self.attempt += 1
        return self.rng.uniform(ceiling / 2.0, ceiling)

    def reset(self) -> None:
        self.attempt = 0


def is_transient(exc: BaseException) -> bool:
    """Network trouble or a server that is (re)starting or overloaded: worth retrying as is."""
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, ApiError) and exc.status in TRANSIENT_STATUSES


def describe(exc: BaseException) -> str:
    """A one-line reason for log lines ("connection refused", "503 Service Unavailable: ...")."""
    if isinstance(exc, ApiError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def retry(
    call: Callable[[], T],
    waiting_for: str,
    stop: threading.Event,
    log: logging.Logger,
    backoff: Backoff | None = None,
) -> T:
    """Run `call` until it succeeds or fails for a non-transient reason (which is raised).

    The worker's server policy (tenacity): transient errors only, `backoff`'s delays, a log line
    saying what it waits for before each pause; setting `stop` ends a pause at once with `Stopped`.
    """
    delays = backoff or Backoff()

    def pause(seconds: float) -> None:
        if stop.wait(seconds):
            raise Stopped(waiting_for)

    def say_why(state: RetryCallState) -> None:
        assert state.outcome is not None and state.next_action is not None
        error = state.outcome.exception()
        assert error is not None  # it retries on exceptions only (retry_if_exception)
        reason = describe(error)
        retry_number, delay = state.attempt_number, state.next_action.sleep
        log.warning("waiting for %s: %s; retry %d in %.1f s", waiting_for, reason, retry_number, delay)

    policy = Retrying(
        retry=retry_if_exception(is_transient),
        wait=lambda _state: delays.next_delay(),
        sleep=pause,
        before_sleep=say_why,
        reraise=True,
    )
    value = policy(call)
    retries = policy.statistics.get("attempt_number", 1) - 1
    if retries:
        log.info("%s: server answered again after %d retries", waiting_for, retries)
    return value
