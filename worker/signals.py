"""How a worker stops: first SIGTERM/SIGINT finishes the current run, the second stops now.

"Stop now" cancels the running experiment and releases its lease, so it goes back to the queue
at once without counting an attempt. `--stop-now` makes the first signal do that (for
orchestrators with a short grace period). SIGKILL cannot be caught; lease expiry covers it.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from types import FrameType


class StopControl:
    """Two levels of stopping, set by signals (or directly) and read by the worker loop."""

    def __init__(self, log: logging.Logger, stop_now_on_first: bool = False) -> None:
        self.log = log
        self.stop_now_on_first = stop_now_on_first
        self.finish = threading.Event()  # finish the current experiment, then exit
        self.now = threading.Event()  # cancel the current experiment, release it, exit
        self._lock = threading.Lock()
        self._run_cancel: threading.Event | None = None

    def install(self) -> None:
        """Route SIGTERM and SIGINT to `handle_signal`.

        The handler only queues the signal: it runs between two bytecodes of the main thread,
        which may hold a lock that Event.set or logging needs. SimpleQueue.put is reentrant.
        """
        received: queue.SimpleQueue[int] = queue.SimpleQueue()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            received.put(signum)

        def dispatch() -> None:
            while True:
                self.handle_signal(received.get())

        threading.Thread(target=dispatch, name="signals", daemon=True).start()
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def handle_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.finish.is_set() or self.stop_now_on_first:
            self.log.warning("%s: stopping now (cancelling the current run, releasing its lease)", name)
            self.request_stop_now()
        else:
            self.log.warning(
                "%s: finishing the current experiment, then exiting (%s again: stop now)", name, name
            )
            self.finish.set()

    def request_stop_now(self) -> None:
        self.finish.set()
        self.now.set()
        with self._lock:
            if self._run_cancel is not None:
                self._run_cancel.set()

    def watch_run(self, cancel: threading.Event | None) -> None:
        """While a run is going, "stop now" also sets its cancel event (None when it ended)."""
        with self._lock:
            self._run_cancel = cancel
            if cancel is not None and self.now.is_set():
                cancel.set()
