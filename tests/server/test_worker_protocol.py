"""The worker protocol of docs/api.md, through the SDK against a live server."""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from client import ApiError, Client
from server.fleet import LONG_POLL_SPREAD
from server.flows.leases import expire_leases
from server.main import build_context
from server.project_init import InitError, init_project

HARNESS_ID, DEVICE = "test-harness", "cpu"


def test_register_pins_and_checks_harness_and_platform(live_factory) -> None:
    live = live_factory(harness_id="", platform="")  # neither configured: the first worker pins both
    client = Client(live.url, live.token("worker"))
    first = client.register(name="a", device="NVIDIA H100", memory_gb=80, harness_id="h-1")
    assert (first.harness_id, first.platform) == ("h-1", "NVIDIA H100")
    assert first.heartbeat_seconds < first.lease_seconds
    again = client.register(name="a", device="NVIDIA H100", memory_gb=80, harness_id="h-1")
    assert again.worker_id == first.worker_id  # re-registering keeps the identity
    for device, harness_id, kind in (
        ("NVIDIA H100", "h-2", "harness-mismatch"),
        ("NVIDIA A100", "h-1", "platform-mismatch"),
    ):
        with pytest.raises(ApiError) as caught:
            client.register(name="b", device=device, memory_gb=80, harness_id=harness_id)
        assert caught.value.status == 409 and caught.value.type.endswith(kind)
        assert "h-1" in caught.value.detail or "NVIDIA H100" in caught.value.detail


def test_claim_heartbeat_progress_result(live, worker_factory) -> None:
    worker = worker_factory(live)
    claim = worker.claim()
    assert claim.experiment_id == 1 and claim.attempt == 1
    assert hashlib.sha256(claim.train_py.encode()).hexdigest() == claim.train_py_sha256
    assert worker.claim() is None  # the baseline is measured before anything else runs
    beat = worker.client.heartbeat(claim.lease_id)
    assert beat.cancel is False and beat.lease_expires_at >= claim.lease_expires_at
    events = [{"step": s, "loss": 5.0 - s / 10, "fraction": s / 10, "elapsed_s": float(s)} for s in range(10)]
    events.append({"step": 10, "loss": float("nan"), "fraction": 1.0})  # a diverged loss is kept as null
    worker.client.send_progress(claim.lease_id, events)
    conditions = {"speed_gflops": 41.5, "load_1m": 0.8, "gpu_sm_clock_mhz": 1980.0, "gpu_temp_c": 64.0}
    answer = worker.report(claim, val_bpb=1.25, mfu_percent=31.5, conditions=conditions)
    assert answer.model_dump() == {
        "experiment_id": 1,
        "run": 1,
        "decision": "keep",
        "status": "kept",
        "reason": "baseline measured: first run val_bpb 1.2500",
    }
    experiment = live.client().experiment(1)
    assert experiment.result.mfu_percent == 31.5 and experiment.result.tokens == 123456
    # The conditions it ran under, and where: in the answer and on the page.
    assert experiment.result.conditions.model_dump(exclude_none=True) == conditions
    assert experiment.result.worker == "gpu0" and experiment.result.extra == {}
    page = httpx.get(f"{live.url}/experiments/1", timeout=30).text
    assert "gpu0" in page and "speed 41.5 GFLOP/s, load 0.80; GPU 1980 MHz, 64 °C" in page
    assert experiment.run_seconds is not None and experiment.val_bpb == 1.25
    progress = live.client().http.get("/experiments/1/progress").json()["events"]
    assert [e["step"] for e in progress] == list(range(11)) and progress[-1]["loss"] is None
    assert "step 42 loss 3.1" in live.client().log(1)


def test_nothing_but_the_baseline_runs_until_the_best_is_measured(
    live_any_db, worker_factory, baseline_source: str
) -> None:
    live = live_any_db
    first, second = worker_factory(live, "gpu0"), worker_factory(live, "gpu1")
    agent = live.client("agent")
    queued = [agent.submit(f"idea {i}", train_py=baseline_source + f"# {i}\n").id for i in range(2)]
    baseline = first.claim()
    assert baseline.experiment_id == 1
    assert second.claim() is None  # work is queued, but nothing is compared with an unmeasured best
    assert first.report(baseline, None, status="crash", error_class="train_error").decision == "revert"
    # The baseline ended without a valid result: the queue opens, and the first valid result will do.
    assert second.claim().experiment_id == queued[0]
    assert first.claim().experiment_id == queued[1]


def test_a_result_is_recorded_once_per_result_id(live, worker_factory) -> None:
    worker = worker_factory(live)
    claim = worker.claim()
    result = {"status": "ok", "val_bpb": 1.0, "device": DEVICE, "harness_id": HARNESS_ID}
    result_id = str(uuid.uuid4())
    first = worker.client.result(claim.lease_id, result_id, result)
    again = worker.client.result(claim.lease_id, result_id, {**result, "val_bpb": 0.5})
    assert again == first
    with pytest.raises(ApiError) as caught:  # a different result for a finished lease
        worker.client.result(claim.lease_id, str(uuid.uuid4()), result)
    assert caught.value.status == 409


def test_a_result_id_belongs_to_one_lease(live, worker_factory, baseline_source: str) -> None:
    worker = worker_factory(live)
    result = {"status": "ok", "val_bpb": 1.0, "device": DEVICE, "harness_id": HARNESS_ID}
    result_id = str(uuid.uuid4())
    worker.client.result(worker.claim().lease_id, result_id, result)
    live.client("agent").submit("next", train_py=baseline_source + "# next\n")
    second = worker.claim()
    with pytest.raises(ApiError) as caught:
        worker.client.result(second.lease_id, result_id, result)
    assert caught.value.status == 409 and caught.value.type.endswith("result-id-reused")
    answer = worker.client.result(second.lease_id, str(uuid.uuid4()), result)  # the lease is still held
    assert answer.experiment_id == second.experiment_id


def test_workers_cannot_touch_each_others_leases(live, worker_factory) -> None:
    mine, theirs = worker_factory(live, "a"), worker_factory(live, "b")
    claim = mine.claim()
    for call in (lambda: theirs.client.heartbeat(claim.lease_id), lambda: theirs.report(claim)):
        with pytest.raises(ApiError) as caught:
            call()
        assert caught.value.status == 404
    with pytest.raises(ApiError) as caught:
        theirs.client.claim(mine.worker_id)
    assert caught.value.status == 404 and "register again" in caught.value.detail


def test_release_requeues_without_counting_an_attempt(live, worker_factory) -> None:
    worker = worker_factory(live)
    claim = worker.claim()
    worker.client.release(claim.lease_id, "shutting down")
    assert live.client().experiment(1).status == "queued"
    again = worker.claim()
    assert again.experiment_id == 1 and again.attempt == 1
    with pytest.raises(ApiError) as caught:
        worker.client.heartbeat(claim.lease_id)
    assert caught.value.status == 409 and "released" in caught.value.detail


def test_counted_releases_end_an_experiment_that_breaks_every_worker(live_factory, worker_factory) -> None:
    live = live_factory(max_attempts=2)
    worker = worker_factory(live)
    first = worker.claim()
    worker.client.release(first.lease_id, "worker error: the scorer failed", count_attempt=True)
    experiment = live.client().experiment(1)
    assert (experiment.status, experiment.attempts) == ("queued", 1)
    second = worker.claim()
    assert (second.experiment_id, second.attempt) == (1, 2)
    worker.client.release(second.lease_id, "worker error: the scorer failed", count_attempt=True)
    experiment = live.client().experiment(1)
    assert experiment.status == "infra_failed" and "attempt 2 of 2" in experiment.reason
    assert "the scorer failed" in experiment.reason
    assert worker.claim() is None  # nothing left to hand out


def test_expired_leases_requeue_then_end_as_infrastructure_failure(live_factory, worker_factory) -> None:
    live = live_factory(lease_seconds=0.3, max_attempts=2, lease_sweep_seconds=60)
    worker = worker_factory(live)
    first = worker.claim()
    time.sleep(0.4)
    with pytest.raises(ApiError) as caught:  # too late: the lease is gone even before the sweep
        worker.client.heartbeat(first.lease_id)
    assert caught.value.status == 409
    assert expire_leases(live.ctx) == 1
    experiment = live.client().experiment(1)
    assert (experiment.status, experiment.attempts) == ("queued", 1)
    second = worker.claim()
    assert (second.experiment_id, second.attempt, second.seed) == (1, 2, first.seed)  # a retry: the same run
    time.sleep(0.4)
    expire_leases(live.ctx)
    experiment = live.client().experiment(1)
    assert experiment.status == "infra_failed" and "attempt 2 of 2" in experiment.reason
    with pytest.raises(ApiError) as caught:  # a result for a lease no longer held is refused
        worker.report(second, 1.0)
    assert caught.value.status == 409


def test_a_runs_seed_is_secret_not_a_function_of_its_numbers(live_factory, worker_factory) -> None:
    """Three projects' experiment 1, run 2 (queued once run 1 is in): the same public numbers,
    seeds drawn apart. A candidate that looks its initialisation up in a table of seeds predicted
    from the ids finds nothing."""
    seeds = []
    for _ in range(3):
        worker = worker_factory(live_factory(decision_rule="noise_aware", noise_runs=2))
        worker.report(worker.claim(), 1.0)
        second = worker.claim()
        assert (second.experiment_id, second.run) == (1, 2)
        seeds.append(second.seed)
    assert len(set(seeds)) == 3 and all(0 <= seed < 2**31 for seed in seeds)


def test_the_background_sweep_requeues_lost_work(live_factory, worker_factory) -> None:
    live = live_factory(lease_seconds=0.2, lease_sweep_seconds=0.1)
    worker = worker_factory(live)
    worker.claim()
    deadline = time.monotonic() + 10
    while live.client().experiment(1).status != "queued":
        assert time.monotonic() < deadline, "the sweeper never requeued the experiment"
        time.sleep(0.05)


def test_long_poll_claim_wakes_up_when_work_arrives(live, worker_factory, baseline_source: str) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)  # the baseline
    started = time.monotonic()
    assert worker.claim(wait_s=0.3) is None
    assert time.monotonic() - started >= 0.3 * (1 - LONG_POLL_SPREAD)  # it ends in its last tenth
    import threading

    submitter = threading.Timer(
        0.3, lambda: live.client("agent").submit("d", train_py=baseline_source + "# x\n")
    )
    submitter.start()
    claim = worker.claim(wait_s=20)
    submitter.join()
    assert claim is not None and claim.experiment_id == 2


def test_cancel_queued_and_running(live, worker_factory, baseline_source: str) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)
    agent, other = live.client("agent"), live.client("agent")
    queued = agent.submit("a", train_py=baseline_source + "# a\n")
    running = agent.submit("b", train_py=baseline_source + "# b\n")
    assert agent.cancel(queued.id).experiment.status == "cancelled"
    claim = worker.claim()
    assert claim.experiment_id == running.id
    with pytest.raises(ApiError) as caught:
        other.cancel(running.id)
    assert caught.value.status == 403
    assert agent.cancel(running.id).experiment.cancel_requested is True
    assert worker.client.heartbeat(claim.lease_id).cancel is True
    worker.client.release(claim.lease_id, "cancelled by the server")
    assert agent.experiment(running.id).status == "cancelled"
    # Twice is once: the cancelled experiment again, as it was; a decided one cannot be cancelled.
    assert agent.cancel(running.id).experiment == agent.experiment(running.id)
    with pytest.raises(ApiError) as caught:
        live.admin().cancel(1)
    assert (caught.value.status, caught.value.problem["detail"]) == (409, "experiment 1 is already kept")
    again = agent.submit("a again", train_py=baseline_source + "# a\n")  # cancelled ones may be resubmitted
    assert again.id not in (queued.id, running.id) and not again.existing


def test_progress_is_thinned_evenly_to_its_bound(live_factory, worker_factory) -> None:
    live = live_factory(max_progress_events=8)
    worker = worker_factory(live)
    claim = worker.claim()
    for first in range(0, 40, 5):
        events = [{"step": s, "loss": 1.0} for s in range(first, first + 5)]
        worker.client.send_progress(claim.lease_id, events)
    steps = [e["step"] for e in live.client().http.get("/experiments/1/progress").json()["events"]]
    assert len(steps) <= 8
    assert steps[0] == 0 and steps[-1] == 39  # the whole run stays covered, start to end
    ideal = (steps[-1] - steps[0]) / (len(steps) - 1)
    # Evenly: no stretch of the run thinned far more than the rest (halving everything each time
    # the bound is hit left one 27-step hole here).
    assert max(b - a for a, b in itertools.pairwise(steps)) <= 2 * ideal


def lose_the_worker(worker) -> None:  # type: ignore[no-untyped-def]
    """Claim the next run and give it back as the worker's failure (a counted attempt)."""
    worker.client.release(worker.claim().lease_id, "worker error: no sandbox", count_attempt=True)


def test_an_admin_queues_failed_or_cancelled_experiments_again(
    live_factory, worker_factory, baseline_source: str, database_url: str
) -> None:
    live = live_factory(database_url, max_attempts=1)
    worker = worker_factory(live)
    lose_the_worker(worker)
    agent = live.client("agent")
    queued = agent.submit("wider", train_py=baseline_source.replace("WIDTH = 64", "WIDTH = 96"))
    agent.cancel(queued.id)
    assert [live.client().experiment(i).status for i in (1, queued.id)] == ["infra_failed", "cancelled"]
    for refused_by in (agent, worker.client, Client(live.url)):  # admins only
        with pytest.raises(ApiError) as caught:
            refused_by.retry(1)
        assert caught.value.status in (401, 403)
    admin = live.admin()
    again = admin.retry(1)
    assert (again.status, again.attempts, again.finished_at, again.reason) == (
        "queued",
        0,
        None,
        None,
    )
    assert admin.retry(queued.id).status == "queued"
    claim = worker.claim()
    assert (claim.experiment_id, claim.attempt) == (1, 1)
    with pytest.raises(ApiError) as caught:  # running: not retryable
        admin.retry(1)
    assert caught.value.status == 409 and caught.value.problem["type"].endswith("/not-retryable")
    worker.report(claim, 1.0)
    with pytest.raises(ApiError) as caught:  # kept: not retryable either
        admin.retry(1)
    assert caught.value.status == 409
    with pytest.raises(ApiError) as caught:
        admin.retry(999)
    assert caught.value.status == 404


def test_cli_retry(live_factory, worker_factory) -> None:
    live = live_factory(max_attempts=1)
    worker = worker_factory(live)
    lose_the_worker(worker)
    command = [sys.executable, "-m", "cli.main", "retry", "1", "--server", live.url]
    command += ["--token", "admin-secret"]
    ran = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    queued = json.loads(ran.stdout)  # only the experiment, as JSON
    assert (queued["id"], queued["status"], queued["attempts"]) == (1, "queued", 0)
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1 and "only infra_failed or cancelled" in ran.stderr, ran.stderr


def test_an_unmeasured_best_keeps_everything_waiting_until_it_is_queued_again_and_measured(
    live_factory, worker_factory, baseline_source: str, database_url: str
) -> None:
    # A first start on a machine whose workers cannot run anything: the baseline loses its worker.
    live = live_factory(database_url, max_attempts=1)
    worker = worker_factory(live)
    lose_the_worker(worker)
    agent = live.client("agent")
    idea = agent.submit("wider", train_py=baseline_source.replace("WIDTH = 64", "WIDTH = 96")).id
    assert live.client().experiment(1).status == "infra_failed"
    assert worker.claim() is None  # nothing is compared with an unmeasured best, not even "any result"

    # It says so: /best, the leaderboard and `autoresearch status`.
    best = agent.best()
    assert (best.measured, best.val_bpb, best.runs) == (False, None, 0)
    page = httpx.get(live.url + "/", timeout=30).text
    assert 'data-stat="best-unmeasured"' in page and "not measured" in page
    token = live.token("agent")
    status = subprocess.run(
        [sys.executable, "-m", "cli.main", "status", "--server", live.url, "--token", token],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0 and "best: not measured" in status.stdout, status.stdout + status.stderr

    # `autoresearch init` on the existing project queues it again instead of refusing.
    assert init_project(live.settings) == 1
    assert live.client().experiment(1).status == "queued"
    lose_the_worker(worker)
    assert live.client().experiment(1).status == "infra_failed"

    # So does a server start (`autoresearch serve`, `up`, a container restart).
    build_context(live.settings)
    baseline = worker.claim()
    assert (baseline.experiment_id, live.client().experiment(1).status) == (1, "running")
    worker.report(baseline, 1.0)
    assert agent.best().measured is True
    assert worker.claim().experiment_id == idea  # measured: the queue moves on
    with pytest.raises(InitError, match="already has a project"):  # a measured project is left alone
        init_project(live.settings)
