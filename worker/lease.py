"""Keeping one lease alive while its experiment runs and until its result is acknowledged.

A background thread heartbeats the lease every `heartbeat_seconds` and sends the progress
events the runner reports, batched, every `progress_interval`: what the claim and each heartbeat
answer say (`progress_seconds`, about a second for a small fleet, more for a large one, so that
a fleet's progress stays within what the server handles: server/fleet.py). When the server says the
lease is gone (409) or asks to cancel, it sets `cancel`, which the runner watches. While the
server is unreachable it keeps trying: training goes on, and the lease survives a server
restart that is shorter than the lease.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime

from client import ApiError, Client
from protocol.result import ProgressEvent
from protocol.spread import spread
from worker.backoff import Backoff, describe, is_transient

# Progress is a sample for humans watching; when the server is away, keep only the newest.
MAX_BUFFERED_EVENTS = 100
# Events sent in one progress call, spread evenly over the batch (the newest always among them).
# The server's work grows with every event it stores, so a call carries a few, which still draw
# a run's loss curve finely (docs/benchmarks.md, "Fleet", has the cost per call).
MAX_EVENTS_PER_CALL = 10


class LeaseKeeper:
    """Heartbeats and progress for one lease; `cancel` is set when the run must stop."""

    def __init__(
        self,
        client: Client,
        lease_id: str,
        experiment_id: int,
        heartbeat_seconds: float,
        log: logging.Logger,
        progress_interval: float = 1.0,
    ) -> None:
        self.client = client
        self.lease_id = lease_id
        self.experiment_id = experiment_id
        self._phase: str | None = None
        self.heartbeat_seconds = heartbeat_seconds
        self.progress_interval = progress_interval
        self.log = log
        self.cancel = threading.Event()
        self.cancel_reason: str | None = None
        self.lost = False  # the server no longer holds this lease for us
        self.expires_at: datetime | None = None
        self._unreachable = False  # logged once per outage, not once per second
        self._run_over = False
        self._events: list[ProgressEvent] = []
        self._events_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{lease_id}", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop heartbeating (the result was acknowledged, or the lease was released or lost)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def add_progress(self, event: ProgressEvent) -> None:
        """The runner's on_progress callback: cheap, never blocks on the network."""
        if event.phase != self._phase:
            self._phase = event.phase
            self.log.info("experiment %s: %s phase", self.experiment_id, event.phase)
        with self._events_lock:
            self._events.append(event)
            del self._events[:-MAX_BUFFERED_EVENTS]

    def run_finished(self) -> None:
        """The run is over: drop progress not yet sent (the result supersedes it)."""
        self._run_over = True
        with self._events_lock:
            self._events.clear()

    def _cancel(self, reason: str, lost: bool) -> None:
        if self.cancel.is_set():
            pass  # said once is enough (a cancelled lease answers so on every heartbeat)
        elif self._run_over:
            self.log.info("lease %s: %s", self.lease_id, reason)
        else:
            self.log.warning("lease %s: %s; cancelling the run", self.lease_id, reason)
        self.cancel_reason = self.cancel_reason or reason
        self.lost = self.lost or lost
        self.cancel.set()

    def _loop(self) -> None:
        backoff = Backoff(base=1.0, cap=max(1.0, self.heartbeat_seconds / 2))
        next_beat = time.monotonic() + self.heartbeat_seconds
        next_progress = time.monotonic() + self.progress_interval
        while not self.lost:
            timeout = max(0.0, min(next_progress, next_beat) - time.monotonic())
            if self._stop.wait(timeout):
                return
            if time.monotonic() >= next_progress:
                self._send_progress()
                next_progress = time.monotonic() + self.progress_interval
            if time.monotonic() >= next_beat and not self.lost:
                ok = self._heartbeat()
                if ok:
                    backoff.reset()
                    next_beat = time.monotonic() + self.heartbeat_seconds
                else:
                    next_beat = time.monotonic() + backoff.next_delay()

    def _heartbeat(self) -> bool:
        try:
            answer = self.client.heartbeat(self.lease_id)
        except Exception as exc:
            self._on_error("heartbeat", exc)
            return False
        self.expires_at = answer.lease_expires_at
        self.progress_interval = answer.progress_seconds
        self._reachable()
        if answer.cancel:
            self._cancel("the server asked to cancel this experiment", lost=False)
        return True

    def _send_progress(self) -> None:
        with self._events_lock:
            batch, self._events = self._events, []
        if not batch:
            return
        try:
            sent = spread(batch, MAX_EVENTS_PER_CALL)
            self.client.send_progress(self.lease_id, sent)
        except Exception as exc:
            if is_transient(exc):
                with self._events_lock:
                    self._events[:0] = batch  # keep order; trimmed to the newest below
                    del self._events[:-MAX_BUFFERED_EVENTS]
            elif not (isinstance(exc, ApiError) and exc.status == 409):
                # Progress is only for watching: a batch the server will not take is dropped.
                self.log.warning("lease %s: progress refused and dropped: %s", self.lease_id, describe(exc))
                return
            self._on_error("progress", exc)
        else:
            self._reachable()

    def _reachable(self) -> None:
        if self._unreachable:
            self._unreachable = False
            self.log.info("lease %s: the server answers again; heartbeats resumed", self.lease_id)

    def _on_error(self, what: str, exc: Exception) -> None:
        if is_transient(exc):
            if self._unreachable:
                return
            self._unreachable = True
            until = f" (lease held until {self.expires_at.isoformat()})" if self.expires_at else ""
            meanwhile = "the result waits in the spool" if self._run_over else "the run goes on"
            self.log.warning(
                "lease %s: %s not delivered, waiting for the server: %s; %s%s",
                self.lease_id,
                what,
                describe(exc),
                meanwhile,
                until,
            )
        elif isinstance(exc, ApiError) and exc.status == 409:
            self._cancel(f"the server no longer holds this lease ({describe(exc)})", lost=True)
        else:
            self._cancel(f"{what} refused: {describe(exc)}", lost=True)
