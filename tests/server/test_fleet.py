"""Carrying a large fleet (server/fleet.py): progress paced to the fleet's size, shared queue looks."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import update

from server.crud import leases
from server.fleet import Fleet, progress_seconds
from server.models import EXPERIMENTS
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


def test_waiting_claims_share_one_look_at_the_queue_a_second() -> None:
    clock = Clock()
    fleet = Fleet(fleet_progress_per_s=50.0, clock=clock)
    looks = 0

    async def look() -> bool:
        nonlocal looks
        looks += 1
        await asyncio.sleep(0.05)
        return looks > 1

    async def many() -> list[bool]:
        return list(await asyncio.gather(*(fleet.anything_queued(look, 0) for _ in range(200))))

    assert asyncio.run(many()) == [False] * 200 and looks == 1
    clock.now += 0.5
    assert asyncio.run(many()) == [False] * 200 and looks == 1  # the answer of half a second ago
    clock.now += 0.6
    assert asyncio.run(many()) == [True] * 200 and looks == 2


def test_the_queue_is_known_empty_only_after_a_fresh_empty_look_and_no_queued_event_since() -> None:
    clock = Clock()
    fleet = Fleet(fleet_progress_per_s=50.0, clock=clock)
    assert not fleet.known_empty(0)  # never looked

    async def empty() -> bool:
        return False

    asyncio.run(fleet.anything_queued(empty, 7))
    assert fleet.known_empty(7)
    assert not fleet.known_empty(8)  # something was queued through this server since
    clock.now += 1.1
    assert not fleet.known_empty(7)  # the look is too old


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
    # 30 long polls: the first ten claim (nobody has looked yet), the later ones mostly not.
    assert 10 <= claims < 20, claims


def test_a_waiting_claim_sees_work_queued_without_an_event(live, worker_factory) -> None:
    """As when another process queues work: no event wakes the claim; the shared look does."""
    worker = worker_factory(live)
    worker.run_next(1.0)  # the baseline
    second = live.client("agent").submit("lr 0.2", train_py="LEARNING_RATE = 0.2\n").id
    hide = update(EXPERIMENTS).where(EXPERIMENTS.c.id == second)
    with live.ctx.db.write() as session:
        session.execute(hide.values(status="cancelled"))

    def requeue() -> None:
        time.sleep(0.5)
        with live.ctx.db.write() as session:
            session.execute(hide.values(status="queued"))

    thread = threading.Thread(target=requeue)
    started = time.monotonic()
    thread.start()
    claim = worker.claim(wait_s=10)
    thread.join()
    assert claim is not None and claim.experiment_id == second
    assert time.monotonic() - started < 3.0  # within a second or two, not at the end of the wait
