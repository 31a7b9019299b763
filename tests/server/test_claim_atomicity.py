"""Many workers claiming at once: each experiment goes to exactly one worker (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from collections import Counter

from protocol.schemas import SubmitIn
from protocol.states import Rule
from server.crud.tokens import Principal
from server.flows import leases
from server.flows.submit import submit
from server.models import Worker


def _queue(live, baseline_source: str, count: int) -> set[int]:
    """Queue `count` distinct experiments (straight through the submit code, to keep the test quick)."""
    live.ctx.settings.max_queued_per_agent = count
    live.client("agent", "queue-filler")
    principal = Principal(_token_id(live, "queue-filler"), "agent", "queue-filler")
    return {
        submit(
            live.ctx,
            principal,
            SubmitIn(description=f"idea {i}", train_py=baseline_source + f"# {i}\n"),
            None,
        ).experiment_id
        for i in range(count)
    }


def _token_id(live, name: str) -> int:
    from sqlalchemy import select

    from server.models import ApiToken

    with live.ctx.db.read() as session:
        return session.scalar(select(ApiToken.id).where(ApiToken.name == name))


def _race(count: int, body) -> None:  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        body(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_concurrent_http_claims_hand_each_experiment_to_exactly_one_worker(
    live_any_db, worker_factory, baseline_source: str
) -> None:
    live = live_any_db
    workers = [worker_factory(live, f"gpu{i}") for i in range(8)]
    workers[0].run_next(1.0)  # measure the baseline first
    submitted = _queue(live, baseline_source, 32)
    claimed: list[tuple[int, int]] = []
    lock = threading.Lock()

    def drain(index: int) -> None:
        while (claim := workers[index].claim()) is not None:
            with lock:
                claimed.append((claim.experiment_id, index))

    _race(len(workers), drain)
    counts = Counter(experiment_id for experiment_id, _ in claimed)
    assert set(counts) == submitted and set(counts.values()) == {1}
    assert len({index for _, index in claimed}) > 1  # the claims really were spread over workers
    assert len(live.client().search(status="running", limit=200).items) == len(submitted)


def test_claims_straight_at_the_database_under_heavy_contention(
    live_any_db, worker_factory, baseline_source
) -> None:
    """The same without HTTP in between: 16 threads calling `claim` on one connection pool."""
    live = live_any_db
    workers = [worker_factory(live, f"w{i}") for i in range(16)]
    workers[0].run_next(1.0)
    submitted = _queue(live, baseline_source, 32)
    with live.ctx.db.read() as session:
        owners = {w.worker_id: session.get(Worker, w.worker_id).token_id for w in workers}
    got: list[int] = []
    lock = threading.Lock()

    def drain(index: int) -> None:
        worker_id = workers[index].worker_id
        principal = Principal(owners[worker_id], "worker", "w")
        while (claim := leases.claim(live.ctx, principal, worker_id)) is not None:
            with lock:
                got.append(claim.experiment_id)

    _race(len(workers), drain)
    assert sorted(got) == sorted(submitted)


def test_first_claims_at_once_each_run_the_best_under_a_number_of_its_own(
    live_any_db, worker_factory, baseline_source
) -> None:
    """Under the noise-aware rule a worker's first claim on a track is a run of the best (a
    calibration run), queued as it claims. 16 first claims at once each get one, numbered apart:
    on PostgreSQL concurrent claims queued the same run number and answered 500 (the fleet bench
    at 1,000 workers) until the best's row was locked first."""
    live = live_any_db
    settings = live.ctx.settings
    settings.decision_rule, settings.noise_runs, settings.best_rerun_every = Rule.NOISE_AWARE, 2, 0
    workers = [worker_factory(live, f"w{i}") for i in range(16)]
    workers[0].run_next(1.0)
    workers[0].run_next(1.002)  # the baseline's two runs: the noise is measured, the gate opens
    _queue(live, baseline_source, 32)  # work queued: calibration runs are due
    with live.ctx.db.read() as session:
        owners = {w.worker_id: session.get(Worker, w.worker_id).token_id for w in workers[1:]}
    got: list[tuple[int, int]] = []
    lock = threading.Lock()

    def first_claim(index: int) -> None:
        worker_id = workers[index + 1].worker_id
        claim = leases.claim(live.ctx, Principal(owners[worker_id], "worker", "w"), worker_id)
        assert claim is not None
        with lock:
            got.append((claim.experiment_id, claim.run))

    _race(len(owners), first_claim)
    assert sorted(got) == [(1, number) for number in range(3, 3 + len(owners))]  # the baseline's
