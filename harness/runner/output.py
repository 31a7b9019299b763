"""Collecting what sandboxed processes print (capped) and pacing progress to the caller."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from protocol.result import ProgressEvent

LOG_TAIL_BYTES = 32 * 1024  # kept from the end of each process's output
READ_CHUNK = 64 * 1024
PROGRESS_INTERVAL_S = 1.0


class OutputTail:
    """Drains a pipe in a thread, keeping only the last LOG_TAIL_BYTES and counting the rest.

    A candidate printing without end costs this thread reads, never unbounded memory.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.tail = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._drain, name="sandbox-output", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self.fd, READ_CHUNK):
                self.total += len(chunk)
                self.tail += chunk
                if len(self.tail) > 2 * LOG_TAIL_BYTES:
                    del self.tail[: len(self.tail) - LOG_TAIL_BYTES]
        except OSError:
            pass
        finally:
            os.close(self.fd)

    def text(self, timeout: float = 2.0) -> str:
        """The kept tail as text, after the writer has gone (or `timeout` seconds)."""
        self.thread.join(timeout)
        kept = bytes(self.tail[-LOG_TAIL_BYTES:])
        dropped = self.total - len(kept)
        head = f"[harness] {dropped} earlier bytes of output dropped\n" if dropped > 0 else ""
        return head + kept.decode("utf-8", errors="replace")


class ProgressPacer:
    """Forwards progress events to the caller at most once a second.

    An event offered too soon is held; a later offer replaces it, and `flush` sends it once its
    time has come, so the last state (e.g. the switch to scoring) is not lost.
    """

    def __init__(self, callback: Callable[[ProgressEvent], None] | None) -> None:
        self.callback = callback
        self.last_sent = -PROGRESS_INTERVAL_S
        self.pending: ProgressEvent | None = None

    def offer(self, event: ProgressEvent) -> None:
        self.pending = event
        self.flush()

    def flush(self) -> None:
        now = time.monotonic()
        if self.callback is None or self.pending is None or now - self.last_sent < PROGRESS_INTERVAL_S:
            return
        event, self.pending, self.last_sent = self.pending, None, now
        try:
            self.callback(event)
        except Exception:  # a failing observer must not fail the experiment it observes
            self.callback = None
