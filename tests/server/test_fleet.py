"""Carrying a large fleet (server/fleet.py): progress paced to the fleet's size, idle long polls."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import update

from protocol.events import EventType
from protocol.schemas import ClaimOut
from protocol.states import RunState
from server.events import Broadcaster, Event
from server.fleet import Fleet, progress_seconds, quietest_slot
from server.flows import leases
from server.models import RUNS
from worker.lease import LeaseKeeper


def test_a_small_fleet_reports_every_second_and_a_large_one_less_often() -> None:
    """The interval for a fleet of n workers online, at FLEET_PROGRESS_PER_S = 50."""
    assert [progress_seconds(n, 50.0) for n in (0, 1, 50, 51, 100, 1000)] == [1.0, 1.0, 1.0, 1.1, 2.0, 20.0]


@given(st.integers(0, 1_000_000), st.floats(0.01, 10_000))
def test_the_fleet_never_sends_more_than_its_rate(online: int, rate: float) -> None:
    interval = progress_seconds(online, rate)
    assert interval >= 1.0
    assert online / interval <= rate * (1 + 1e-9)  # all workers together, at most `rate` a second
    assert interval - 0.1 < max(1.0, online / rate)  # and no slower than that needs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_look_wakes_as_many_waiting_claims_as_runs_are_queued() -> None:
    bus, fleet = Broadcaster(), Fleet(fleet_progress_per_s=50.0, clock=Clock())
    asked: list[int] = []

    def queued(count: int) -> Callable[[int], Awaitable[int]]:
        async def look(limit: int) -> int:
            asked.append(limit)
            return min(count, limit)

        return look

    async def scenario() -> list[bool | None]:
        waits = [asyncio.create_task(bus.wait_for_queued(30)) for _ in range(5)]
        await asyncio.sleep(0)
        await fleet.look_once(queued(2), bus)
        await asyncio.sleep(0)
        assert not fleet.known_empty(bus.queued_events)
        await fleet.look_once(queued(0), bus)
        assert fleet.known_empty(bus.queued_events) and bus.claims_waiting == 3
        await fleet.look_once(queued(9), bus)  # more than wait: all of them
        return list(await asyncio.gather(*waits))

    assert asyncio.run(scenario()) == [True] * 5
    assert asked == [5, 3, 3]  # counted up to the claims waiting, no further


def test_the_queue_is_known_empty_only_after_a_fresh_empty_look_and_no_queued_event_since() -> None:
    clock = Clock()
    bus, fleet = Broadcaster(), Fleet(fleet_progress_per_s=50.0, clock=clock)
    assert not fleet.known_empty(0)  # never looked

    async def empty(_limit: int) -> int:
        return 0

    bus.queued_events = 7
    asyncio.run(fleet.look_once(empty, bus))
    assert fleet.known_empty(7)
    assert not fleet.known_empty(8)  # something was queued through this server since
    clock.now += 1.9
    assert fleet.known_empty(7)  # the next look is due, and wakes the claims if work came
    clock.now += 0.2
    assert not fleet.known_empty(7)  # the look is too old: no look is being made


def test_a_queued_event_wakes_the_claim_that_waited_longest_and_others_wait_for_their_deadline() -> None:
    async def scenario() -> None:
        bus = Broadcaster()
        bus.bind(asyncio.get_running_loop())
        first = asyncio.create_task(bus.wait_for_queued(30))
        await asyncio.sleep(0)
        second, short = (
            asyncio.create_task(bus.wait_for_queued(30)),
            asyncio.create_task(bus.wait_for_queued(0.05)),
        )
        await asyncio.sleep(0)
        bus.publish([Event(EventType.QUEUED, {"id": 1})])
        assert await first is True
        assert await short is False
        assert not second.done() and bus.claims_waiting == 1
        hung_up = asyncio.create_task(bus.wait_for_queued(30))
        await asyncio.sleep(0)
        second.cancel()  # its client hung up: the wake goes to the next claim
        bus.wake_claims(1)
        assert await hung_up is True
        assert second.cancelled() and bus.claims_waiting == 0

    asyncio.run(scenario())


def test_a_long_poll_ends_in_the_slot_where_fewest_end() -> None:
    ends = Counter({10: 2, 11: 1, 12: 1, 13: 3})
    assert quietest_slot(ends, 10, 13, 0.0) == 11
    assert quietest_slot(ends, 10, 13, 0.99) == 12  # equals: the draw picks
    assert quietest_slot(ends, 14, 15, 0.0) == 14  # nothing ends there yet


@given(st.floats(0, 30), st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=50))
def test_a_long_poll_ends_in_the_last_tenth_of_its_wait_never_after(
    wait_s: float, draws: list[float]
) -> None:
    clock = Clock()
    fleet = Fleet(fleet_progress_per_s=50.0, clock=clock, draw=itertools.cycle(draws).__next__)
    for _ in range(30):  # each later one among more others
        deadline, _slot = fleet.start_long_poll(wait_s)
        assert clock.now + 0.9 * wait_s <= deadline <= clock.now + wait_s


def test_a_fleet_that_polls_together_drifts_apart() -> None:
    """A thousand long polls of 5 s from one instant (a server restart), each polling again when
    its answer comes: the answers spread over the last tenth of the wait, then further."""
    clock = Clock()
    fleet = Fleet(fleet_progress_per_s=50.0, clock=clock, draw=random.Random(14).random)
    polls = [fleet.start_long_poll(5.0) for _ in range(1000)]
    deadlines = [deadline - clock.now for deadline, _slot in polls]
    assert min(deadlines) >= 4.5 and max(deadlines) <= 5.0
    assert set(Counter(int(deadline * 100) for deadline in deadlines).values()) == {20}  # 20 each 10 ms
    again = []
    for deadline, slot in sorted(polls):
        clock.now = deadline
        fleet.end_long_poll(slot)
        again.append(fleet.start_long_poll(5.0)[0])
    per_10_ms = Counter(int(deadline * 100) for deadline in again)
    assert max(per_10_ms.values()) <= 14 and max(again) - min(again) > 0.9  # over a second now


def wait_for_interval(worker, claim: dict, expected: float) -> None:
    """Heartbeat until the answer says `expected` (the server counts its workers every 5 s)."""
    deadline = time.monotonic() + 15
    while worker.client.heartbeat(claim.lease_id).progress_seconds != expected:
        assert time.monotonic() < deadline, f"the interval never became {expected}"
        time.sleep(0.2)


def test_claims_and_heartbeats_tell_each_worker_an_interval_scaled_to_the_fleet(
    live_factory, worker_factory
) -> None:
    live = live_factory(fleet_progress_per_s=1.0)
    workers = [worker_factory(live, f"gpu{i}") for i in range(3)]
    baseline = workers[0].claim()
    wait_for_interval(workers[0], baseline, 3.0)  # three workers online, one progress call a second
    workers[0].report(baseline)
    agent = live.client("agent")
    agent.submit("lr 0.1", train_py="LEARNING_RATE = 0.1\n")
    assert workers[1].claim().progress_seconds == 3.0


def test_the_lease_keeper_follows_the_interval_the_heartbeats_give(live_factory, worker_factory) -> None:
    live = live_factory(fleet_progress_per_s=0.4)  # one worker online: every 2.5 s
    worker = worker_factory(live)
    claim = worker.claim()
    log = logging.getLogger("test")
    keeper = LeaseKeeper(worker.client, claim.lease_id, 1, heartbeat_seconds=0.2, log=log)
    assert keeper.progress_interval == 1.0  # until the server says otherwise
    keeper.start()
    try:
        deadline = time.monotonic() + 15
        while keeper.progress_interval != 2.5:
            assert time.monotonic() < deadline, "the keeper never took the server's interval"
            time.sleep(0.05)
    finally:
        keeper.stop()


def test_idle_long_polls_skip_the_claim_while_the_queue_is_known_empty(
    live, worker_factory, monkeypatch
) -> None:
    workers = [worker_factory(live, f"gpu{i}") for i in range(10)]
    workers[0].run_next(1.0)  # the baseline: now the queue is empty
    claims = 0
    real_claim = leases.claim

    def counted(*args):
        nonlocal claims
        claims += 1
        return real_claim(*args)

    monkeypatch.setattr(leases, "claim", counted)

    def poll(worker) -> None:
        for _ in range(3):
            assert worker.claim(wait_s=1.5) is None

    threads = [threading.Thread(target=poll, args=(worker,)) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 30 long polls, each of which claims at least once unless the queue is known empty: the first
    # ones claim unless the server's own look (once a second) has found it empty before them, the
    # later ones mostly not. (A bound of 10 from below raced that look: 9 in one CI run.)
    assert claims < 20, claims


def test_waiting_claims_see_work_queued_without_an_event(live, worker_factory) -> None:
    """As when another process queues work: no event wakes the claims; the look a second does,
    one claim for each run queued."""
    workers = [worker_factory(live, f"gpu{i}") for i in range(3)]
    workers[0].run_next(1.0)  # the baseline
    agent = live.client("agent")
    queued = {agent.submit(f"lr 0.{i}", train_py=f"LEARNING_RATE = 0.{i}\n").id for i in (2, 3)}
    hide = update(RUNS).where(RUNS.c.experiment_id.in_(queued))
    with live.ctx.db.write() as session:
        session.execute(hide.values(status=RunState.CANCELLED))
    claims: list[ClaimOut | None] = []

    def poll(worker) -> None:
        claims.append(worker.claim(wait_s=5))

    threads = [threading.Thread(target=poll, args=(worker,)) for worker in workers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 4
    while live.ctx.bus.claims_waiting < 3:  # all three wait
        assert time.monotonic() < deadline, "the claims never waited"
        time.sleep(0.01)
    with live.ctx.db.write() as session:
        session.execute(hide.values(status=RunState.QUEUED))
    for thread in threads:
        thread.join()
    # A claim answers with a run only when woken: at its deadline it answers 204 at once.
    assert sorted(claim.experiment_id for claim in claims if claim is not None) == sorted(queued)
    assert claims.count(None) == 1


def test_a_look_and_a_queued_event_wake_the_claims_of_the_track_the_work_is_on() -> None:
    """Tracks: work queued on one track wakes claims of workers that serve it, oldest first; a
    claim whose tracks are not known yet may take any."""

    async def scenario() -> list[bool | None]:
        bus, fleet = Broadcaster(), Fleet(fleet_progress_per_s=50.0, clock=Clock())
        bus.bind(asyncio.get_running_loop())
        tracks = [frozenset({"a"}), frozenset({"b"}), frozenset({"a"}), None, frozenset({"b"})]
        waits = [asyncio.create_task(bus.wait_for_queued(0.5, t)) for t in tracks]
        await asyncio.sleep(0)

        async def look(_limit: int) -> dict[str | None, int]:
            return {"a": 1, "c": 3}

        await fleet.look_once(look, bus)  # the oldest claim of track a; nobody serves c but the unknown one
        assert fleet.known_empty(bus.queued_events, ["b"]) and not fleet.known_empty(bus.queued_events, ["a"])
        bus.publish([Event(EventType.QUEUED, {"experiment_id": 7, "track": "b"})])  # the oldest of b
        return list(await asyncio.gather(*waits))

    assert asyncio.run(scenario()) == [True, True, False, True, False]
