"""Carrying a large fleet (server/fleet.py): progress paced to the fleet's size, shared queue looks."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import update

from server.fleet import Fleet, progress_seconds
from server.models import EXPERIMENTS
from worker.lease import LeaseKeeper


def test_a_small_fleet_reports_every_second_and_a_large_one_less_often() -> None:
    assert [progress_seconds(n, 50.0) for n in (0, 1, 50, 51, 100, 1000)] == [1.0, 1.0, 1.0, 1.1, 2.0, 20.0]


@given(st.integers(0, 1_000_000), st.floats(0.01, 10_000))
def test_the_fleet_never_sends_more_than_its_rate(running: int, rate: float) -> None:
    interval = progress_seconds(running, rate)
    assert interval >= 1.0
    assert running / interval <= rate * (1 + 1e-9)  # all workers together, at most `rate` a second
    assert interval - 0.1 < max(1.0, running / rate)  # and no slower than that needs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_running_leases_count_from_claim_to_result_or_silence() -> None:
    clock = Clock()
    fleet = Fleet(lease_seconds=60.0, fleet_progress_per_s=2.0, clock=clock)
    assert [fleet.lease_heard(f"lease-{i}") for i in range(4)] == [1.0, 1.0, 1.5, 2.0]
    assert fleet.lease_heard("lease-0") == 2.0  # heard again: still four running
    fleet.lease_ended("lease-1")  # its result came
    assert fleet.running == 3
    clock.now += 30
    fleet.lease_heard("lease-2")
    clock.now += 31  # lease-0 and lease-3 silent for 61 s: they expired on the server too
    assert fleet.lease_heard("lease-2") == 1.0 and fleet.running == 1


def test_waiting_claims_share_one_look_at_the_queue_a_second() -> None:
    clock = Clock()
    fleet = Fleet(lease_seconds=60.0, fleet_progress_per_s=50.0, clock=clock)
    looks = 0

    async def look() -> bool:
        nonlocal looks
        looks += 1
        await asyncio.sleep(0.05)
        return looks > 1

    async def many() -> list[bool]:
        return list(await asyncio.gather(*(fleet.anything_queued(look) for _ in range(200))))

    assert asyncio.run(many()) == [False] * 200 and looks == 1
    clock.now += 0.5
    assert asyncio.run(many()) == [False] * 200 and looks == 1  # the answer of half a second ago
    clock.now += 0.6
    assert asyncio.run(many()) == [True] * 200 and looks == 2


def test_claims_and_heartbeats_tell_each_worker_its_progress_interval(live_factory, worker_factory) -> None:
    live = live_factory(fleet_progress_per_s=1.0)
    workers = [worker_factory(live, f"gpu{i}") for i in range(3)]
    baseline = workers[0].claim()
    assert baseline["progress_seconds"] == 1.0
    workers[0].report(baseline)
    agent = live.client("agent")
    for lr in (0.1, 0.2, 0.3):
        agent.submit(f"lr {lr}", train_py=f"LEARNING_RATE = {lr}\n")
    claims = [worker.claim() for worker in workers]
    assert [claim["progress_seconds"] for claim in claims] == [1.0, 2.0, 3.0]  # 1, 2, 3 running
    beat = workers[0].client.heartbeat(claims[0]["lease_id"])
    assert beat["progress_seconds"] == 3.0
    workers[1].report(claims[1])
    workers[2].client.release(claims[2]["lease_id"], "stopping", False)
    assert workers[0].client.heartbeat(claims[0]["lease_id"])["progress_seconds"] == 1.0


def test_the_lease_keeper_follows_the_interval_the_heartbeats_give(live_factory, worker_factory) -> None:
    live = live_factory(fleet_progress_per_s=0.4)  # one running worker: every 2.5 s
    worker = worker_factory(live)
    claim = worker.claim()
    keeper = LeaseKeeper(
        worker.client, claim["lease_id"], 1, heartbeat_seconds=0.2, log=logging.getLogger("t")
    )
    assert keeper.progress_interval == 1.0  # until the server says otherwise
    keeper.start()
    try:
        deadline = time.monotonic() + 10
        while keeper.progress_interval != 2.5:
            assert time.monotonic() < deadline, "the keeper never took the server's interval"
            time.sleep(0.05)
    finally:
        keeper.stop()


def test_a_waiting_claim_sees_work_queued_without_an_event(live, worker_factory) -> None:
    """As when another process queues work: no event wakes the claim; the shared look does."""
    worker = worker_factory(live)
    worker.run_next(1.0)  # the baseline
    second = live.client("agent").submit("lr 0.2", train_py="LEARNING_RATE = 0.2\n")["id"]
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
    assert claim is not None and claim["experiment_id"] == second
    assert time.monotonic() - started < 3.0  # within a second or two, not at the end of the wait
