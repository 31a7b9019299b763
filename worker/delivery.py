"""Sending spooled results to the server in the background until each is acknowledged.

The worker loop spools a result and moves on to the next experiment; this thread delivers it,
oldest first, retrying with backoff while the server is away. The lease of a result is kept
alive until the server has the result, so a server restart does not expire it meanwhile.
"""

from __future__ import annotations

import logging
import threading

from client import ApiError, Client, SchemaError
from worker.backoff import Backoff, describe, is_transient
from worker.lease import LeaseKeeper
from worker.spool import Spool, SpooledResult

# The token was refused: results stay spooled until an operator fixes it and restarts.
AUTH_STATUSES = frozenset({401, 403})


class ResultSender:
    """One thread delivering the spool; `drain` waits until the spool is empty."""

    def __init__(self, spool: Spool, client: Client, log: logging.Logger) -> None:
        self.spool = spool
        self.client = client
        self.log = log
        self._keepers: dict[str, LeaseKeeper] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="result-sender", daemon=True)

    def start(self) -> ResultSender:
        self._thread.start()
        return self

    def submit(self, entry: SpooledResult, keeper: LeaseKeeper | None) -> None:
        """Deliver `entry` (already in the spool); `keeper` is stopped once the server has it."""
        with self._lock:
            if keeper is not None:
                self._keepers[entry.result_id] = keeper
            self._idle.clear()
        self._wake.set()

    def drain(self, give_up: threading.Event) -> bool:
        """Wait until every spooled result is delivered (True) or `give_up` is set (False)."""
        self._wake.set()
        logged = False
        while not self._idle.wait(0.2):
            if give_up.is_set():
                return False
            if not logged:
                count = len(self.spool.pending())
                if count:
                    self.log.info(
                        "waiting to deliver %d spooled result(s) before exiting "
                        "(signal again to exit now; they are resent on the next start)",
                        count,
                    )
                logged = True
        return True

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join()
        with self._lock:
            keepers, self._keepers = list(self._keepers.values()), {}
        for keeper in keepers:
            keeper.stop()

    def _loop(self) -> None:
        backoff = Backoff()
        while not self._closed.is_set():
            self._wake.clear()
            entries = self.spool.pending()
            if not entries:
                with self._lock:
                    if not self._wake.is_set():
                        self._idle.set()
                self._wake.wait()
                continue
            for entry in entries:
                if self._closed.is_set() or not self._deliver(entry):
                    break
            else:
                backoff.reset()
                continue
            if not self._closed.is_set():
                self._closed.wait(backoff.next_delay())

    def _deliver(self, entry: SpooledResult) -> bool:
        """Send one result; False when it should be tried again later."""
        try:
            answer = self.client.result(entry.lease_id, entry.result_id, entry.result)
        except Exception as exc:
            if is_transient(exc):
                self.log.warning(
                    "experiment %s: result %s not delivered yet, waiting for the server: %s",
                    entry.experiment_id,
                    entry.result_id,
                    describe(exc),
                )
                return False
            if isinstance(exc, ApiError) and exc.status in AUTH_STATUSES:
                self.log.error(
                    "experiment %s: the server refused this worker's token (%s); the result stays in %s",
                    entry.experiment_id,
                    describe(exc),
                    self.spool.pending_dir,
                )
                return False
            if isinstance(exc, SchemaError):
                # A success status: the server has the result; only its answer is not the model.
                self.spool.acknowledge(entry.result_id)
                self.log.warning(
                    "experiment %s: result %s recorded, but the answer was not understood: %s",
                    entry.experiment_id,
                    entry.result_id,
                    exc,
                )
            elif not isinstance(exc, ApiError):
                # A bug here must not lose the result: keep it spooled and try again later.
                self.log.exception(
                    "experiment %s: sending result %s failed", entry.experiment_id, entry.result_id
                )
                return False
            else:
                where = self.spool.reject(entry.result_id, describe(exc))
                self.log.error(
                    "experiment %s: the server refused result %s for good (%s); kept in %s",
                    entry.experiment_id,
                    entry.result_id,
                    describe(exc),
                    where,
                )
        else:
            self.spool.acknowledge(entry.result_id)
            self.log.info(
                "experiment %s: result recorded, decision %s (%s)",
                entry.experiment_id,
                answer.decision,
                answer.reason,
            )
        with self._lock:
            keeper = self._keepers.pop(entry.result_id, None)
        if keeper is not None:
            keeper.stop()
        return True
