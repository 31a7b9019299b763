"""In-process event bus: handlers publish, `GET /events` subscribers receive (server-sent events).

Handlers run in worker threads, subscribers in the event loop, so `publish` hands events to the
loop with `call_soon_threadsafe`. Each subscriber has a bounded queue; one that falls that far
behind is dropped (its stream ends and the client reconnects with Last-Event-ID). A ring buffer
of recent events lets a reconnecting client resume. Subscribers are capped in total and per
client (a token, else an address): each holds a queue and a connection, and anyone may subscribe
when reads are public. This bus lives in one process: running
several server processes needs a shared bus (e.g. PostgreSQL LISTEN/NOTIFY) instead.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.events import EventType


@dataclass(frozen=True)
class Event:
    type: EventType
    data: dict[str, Any]
    id: int = 0

    def encode(self) -> str:
        return f"id: {self.id}\nevent: {self.type}\ndata: {json.dumps(self.data, default=str)}\n\n"


@dataclass
class _Subscriber:
    queue: asyncio.Queue[Event | None]
    types: frozenset[EventType]
    client: str


class TooManySubscribers(Exception):
    """The bus, or this client, already has as many subscribers as allowed."""


@dataclass
class Broadcaster:
    history_size: int = 1000
    queue_size: int = 1000
    max_subscribers: int = 500
    max_per_client: int = 10
    _loop: asyncio.AbstractEventLoop | None = None
    _subscribers: list[_Subscriber] = field(default_factory=list)
    _per_client: Counter[str] = field(default_factory=Counter)
    _history: deque[Event] = field(default_factory=deque)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_id: int = 0
    _closed: bool = False  # the server stops (`close`)
    # Long-polling claims, oldest first, each with the tracks its worker serves. Each "queued"
    # event wakes one of them that serves the event's track (one new experiment, one worker), not
    # all: waking every idle worker makes them all queue for the database's write lock for
    # nothing. Ordered by key: a thousand wait at once, and each is added and removed in O(1)
    # (server/fleet.py).
    _claim_waiters: OrderedDict[asyncio.Future[bool], frozenset[str] | None] = field(
        default_factory=OrderedDict
    )
    queued_events: int = 0  # "queued" events delivered so far (server/fleet.py)
    _signals: dict[EventType, asyncio.Event] = field(default_factory=dict)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the server's event loop (at startup)."""
        self._loop = loop

    @property
    def last_event_id(self) -> int:
        """The id of the latest published event (0 before the first): a cheap "has anything changed"."""
        return self._last_id

    def publish(self, events: list[Event]) -> None:
        """Publish from any thread; events get increasing ids in publication order."""
        if not events:
            return
        with self._lock:
            numbered = [Event(e.type, e.data, next(self._ids)) for e in events]
            self._last_id = numbered[-1].id
        if self._loop is None or self._loop.is_closed():
            return
        try:
            self._loop.call_soon_threadsafe(self._deliver, numbered)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            return

    def _deliver(self, events: list[Event]) -> None:
        for event in events:
            self._history.append(event)
            if len(self._history) > self.history_size:
                self._history.popleft()
            for subscriber in list(self._subscribers):
                if event.type not in subscriber.types:
                    continue
                if subscriber.queue.full():
                    self._drop(subscriber)
                else:
                    subscriber.queue.put_nowait(event)
            if event.type is EventType.QUEUED:
                self.queued_events += 1
                self.wake_claims(1, event.data.get("track"))
            if event.type in self._signals:
                self._signals[event.type].set()

    def wake_claims(self, count: int, track: str | None = None) -> None:
        """Wake the `count` claims that have waited longest (all of them, if fewer wait), of
        workers that serve `track` (None: any)."""
        if track is not None:
            self.wake_by_track({track: count})
            return
        while count > 0 and self._claim_waiters:
            waiter, _ = self._claim_waiters.popitem(last=False)
            if not waiter.done():  # else it timed out or its client hung up, and it is leaving
                waiter.set_result(True)
                count -= 1

    def wake_by_track(self, counts: Mapping[str | None, int]) -> None:
        """Wake, oldest first and in one pass over the waiting claims, up to counts[t] claims of
        workers that serve track t (counts[None]: of any worker)."""
        left = {track: n for track, n in counts.items() if n > 0}
        anyone = left.pop(None, 0)
        woken = []
        for waiter, tracks in self._claim_waiters.items():
            if not left and not anyone:
                break
            if waiter.done():  # it timed out or its client hung up, and it is leaving
                continue
            served = next((t for t in (left if tracks is None else tracks) if t in left), None)
            if served is not None:
                left[served] -= 1
                if not left[served]:
                    del left[served]
            elif anyone:
                anyone -= 1
            else:
                continue
            woken.append(waiter)
        for waiter in woken:
            del self._claim_waiters[waiter]
            waiter.set_result(True)

    def signal(self, type_: EventType) -> asyncio.Event:
        """Set each time an event of this type is delivered, for a background task of the server
        to wait on (it clears it). Made on the event loop."""
        return self._signals.setdefault(type_, asyncio.Event())

    @property
    def claims_waiting(self) -> int:
        return len(self._claim_waiters)

    def _drop(self, subscriber: _Subscriber) -> None:
        self.unsubscribe(subscriber)
        while not subscriber.queue.empty():
            subscriber.queue.get_nowait()
        subscriber.queue.put_nowait(None)  # tells the stream to end

    def subscribe(self, types: frozenset[EventType], last_event_id: int | None, client: str) -> _Subscriber:
        """Must be called in the loop. Replays buffered events after `last_event_id`.

        Raises TooManySubscribers past `max_subscribers` in all or `max_per_client` for `client`."""
        if len(self._subscribers) >= self.max_subscribers:
            raise TooManySubscribers(f"the server has {len(self._subscribers)} event streams open, its limit")
        if self._per_client[client] >= self.max_per_client:
            raise TooManySubscribers(f"this client has {self.max_per_client} event streams open, its limit")
        subscriber = _Subscriber(asyncio.Queue(self.queue_size), types, client)
        if last_event_id is not None:
            for event in self._history:
                if event.id > last_event_id and event.type in types and not subscriber.queue.full():
                    subscriber.queue.put_nowait(event)
        self._subscribers.append(subscriber)
        self._per_client[subscriber.client] += 1
        return subscriber

    def unsubscribe(self, subscriber: _Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)
            self._per_client[subscriber.client] -= 1
            if not self._per_client[subscriber.client]:
                del self._per_client[subscriber.client]

    def close(self) -> None:
        """The server stops: end every event stream (each client reconnects with Last-Event-ID once
        a server is back) and every long-poll claim, now and from now on (each answers that
        nothing came: its worker asks again). Must be called in the loop."""
        self._closed = True
        for subscriber in list(self._subscribers):
            self._drop(subscriber)
        for waiter in list(self._claim_waiters):
            _time_out(waiter)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    async def wait_for_queued(self, timeout: float, tracks: frozenset[str] | None = None) -> bool:
        """True when woken for queued work of one of `tracks` (None: any; `wake_claims`), False
        after `timeout` seconds.

        One timer for the whole wait, not one a second: a thousand claims wait at once."""
        if self._closed:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._claim_waiters[waiter] = tracks
        timer = loop.call_later(timeout, _time_out, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._claim_waiters.pop(waiter, None)


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
