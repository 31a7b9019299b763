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

    Between attempts it logs what it is waiting for and sleeps with backoff; setting `stop`
    ends the wait at once with `Stopped`.
    """
    backoff = backoff or Backoff()
    while True:
        try:
            value = call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = backoff.next_delay()
            log.warning(
                "waiting for %s: %s; retry %d in %.1f s", waiting_for, describe(exc), backoff.attempt, delay
            )
            if stop.wait(delay):
                raise Stopped(waiting_for) from exc
            continue
        if backoff.attempt:
            log.info("%s: server answered again after %d retries", waiting_for, backoff.attempt)
        return value
