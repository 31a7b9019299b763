"""The line protocol between sandboxed processes and the trusted harness.

Sandboxed processes write one JSON object per line on a pipe. Everything read from a sandbox is
hostile input: lines are size-capped, non-JSON and unknown events are dropped, numbers are
checked, and nothing is ever evaluated or unpickled. Only trusted code reads these messages.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_LINE_BYTES = 16 * 1024
MAX_TEXT_CHARS = 4000
# autoresearch's fast-fail rule: a NaN or this large a loss means the run has diverged.
DIVERGED_LOSS = 100.0
EVENTS = frozenset(
    {"progress", "phase", "error", "stats", "libraries", "ready", "preloaded", "loaded", "done", "speed"}
)


def encode(event: str, **fields: Any) -> bytes:
    """One message line, as the sandboxed side writes it."""
    return (json.dumps({"ev": event, **fields}, allow_nan=True) + "\n").encode()


def number(value: Any, low: float = -1e18, high: float = 1e18) -> float | None:
    """A float from untrusted input, or None. NaN and infinities are kept: they mean divergence."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return value
    return value if low <= value <= high else None


def count(value: Any) -> int | None:
    """A non-negative int from untrusted input, or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < 2**62 else None


def text(value: Any) -> str:
    return value[-MAX_TEXT_CHARS:] if isinstance(value, str) else ""


class LineReader:
    """Splits a byte stream into messages, dropping anything oversized or malformed."""

    def __init__(self) -> None:
        self._buffer = b""
        self._skipping = False  # inside an oversized line: drop until its newline

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        self._buffer += data
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                if len(self._buffer) > MAX_LINE_BYTES:
                    self._buffer = b""
                    self._skipping = True
                return messages
            line, self._buffer = self._buffer[:newline], self._buffer[newline + 1 :]
            if self._skipping:
                self._skipping = False
                continue
            message = parse_line(line)
            if message is not None:
                messages.append(message)


def parse_line(line: bytes) -> dict[str, Any] | None:
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("ev") not in EVENTS:
        return None
    return message
