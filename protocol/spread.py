"""Evenly spread samples: the few a worker sends per progress call and an MCP answer's loss curve."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def spread(samples: list[T], most: int) -> list[T]:
    """At most `most` (>= 1) of `samples`, in order, evenly spread: the last one always kept, and
    the first too when more than one is."""
    if len(samples) <= most:
        return samples
    if most == 1:
        return samples[-1:]
    last = len(samples) - 1
    return [samples[round(i * last / (most - 1))] for i in range(most)]
