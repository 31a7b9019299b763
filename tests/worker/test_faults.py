"""Fault tests with real processes: workers killed, the server restarted, workers in parallel."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from protocol.schemas import ExperimentOut
from testkit.candidates import bigram
from testkit.processes import Project, wait_until
from tests.proc_scan import processes_mentioning

pytestmark = pytest.mark.heavy


def results_of(project: Project, experiment_id: int) -> list[tuple[str, str]]:
    return project.query("SELECT id, worker_id FROM results WHERE experiment_id = ?", experiment_id)


def leases_of(project: Project, experiment_id: int) -> list[tuple[str, str, str]]:
    """(worker name, lease state, lease id) of every lease of the experiment, oldest first."""
    return project.query(
        "SELECT w.name, l.state, l.id FROM leases l JOIN workers w ON w.id = l.worker_id "
        "WHERE l.experiment_id = ? ORDER BY l.claimed_at",
        experiment_id,
    )


# Long enough that the kill surely lands while the first worker trains; the second runs it whole
# once the short lease has expired.
@pytest.mark.parametrize("project", [{"lease_seconds": 3, "time_budget": 10}], indirect=True)
def test_sigkilled_worker_experiment_runs_again_elsewhere_and_is_recorded_once(project: Project) -> None:
    """Slow (30 to 60 s): the kill must land during training (TIME_BUDGET 10 s), then a second
    worker waits for the lease to expire and runs the experiment whole."""
    first = project.worker("first")
    project.wait_training(1, first)
    first.signal(signal.SIGKILL)
    first.wait(timeout=10)
    # The sandbox dies with its worker (no orphan keeps training on the GPU). The scorer, started at
    # idle priority, ends once it reads its closed pipe: on a busy machine it may first be waiting for
    # a core to finish importing torch.
    state = str(project.tmp / "workers" / "first")
    wait_until(lambda: not processes_mentioning(state), 30, "the killed worker's runs to end")

    second = project.worker("second")
    done = project.final(1)
    assert first.claimed() == [1] and second.claimed() == [1]
    assert [(name, state) for name, state, _ in leases_of(project, 1)] == [
        ("first", "expired"),
        ("second", "finished"),
    ]
    assert done.attempts == 2  # the killed run counted as an attempt
    ((_, worker_id),) = results_of(project, 1)  # recorded exactly once, by the second worker
    assert project.query("SELECT name FROM workers WHERE id = ?", worker_id) == [("second",)]


@pytest.mark.parametrize("project", [{"lease_seconds": 3, "time_budget": 10}], indirect=True)
def test_frozen_worker_loses_its_lease_and_stops_when_it_wakes(project: Project) -> None:
    """A worker cut off longer than the lease (SIGSTOP stands in for a network partition)."""
    frozen = project.worker("frozen")
    project.wait_training(1, frozen)
    frozen.signal(signal.SIGSTOP)
    other = project.worker("other")
    other.wait_for_log(r"experiment 1 run 1 \(seed \d+, attempt 2\): claimed", timeout=60)
    frozen.signal(signal.SIGCONT)
    # Awake, it learns from the server that the lease is gone: its run, or its result, is dropped.
    frozen.wait_for_log(
        r"experiment 1: dropped, the lease was lost|experiment 1: the server refused result \S+ for good",
        timeout=60,
    )
    project.final(1)
    assert [(name, state) for name, state, _ in leases_of(project, 1)] == [
        ("frozen", "expired"),
        ("other", "finished"),
    ]
    ((_, worker_id),) = results_of(project, 1)
    assert project.query("SELECT name FROM workers WHERE id = ?", worker_id) == [("other",)]
    frozen.check_alive()  # and it goes on with other work


@pytest.mark.parametrize("project", [{"lease_seconds": 60, "time_budget": 10}], indirect=True)
def test_server_restart_while_training_result_delivered_when_back(project: Project) -> None:
    worker = project.worker("w")
    project.wait_training(1, worker)
    project.server.stop()
    # The run finishes while the server is away; the result waits in the spool.
    worker.wait_for_log(r"experiment 1: \w+, val_bpb .*spooled", timeout=120)
    worker.wait_for_log(r"result \S+ not delivered yet, waiting for the server", timeout=30)
    assert len(list((project.tmp / "workers" / "w" / "spool" / "pending").glob("*.json"))) == 1

    project.server.start()
    done = project.final(1)
    worker.wait_for_log(r"experiment 1: result recorded", timeout=60)
    assert done.result.status != "crash"  # heartbeats failing did not cancel the run
    assert done.attempts == 1
    assert [(name, state) for name, state, _ in leases_of(project, 1)] == [("w", "finished")]
    assert len(results_of(project, 1)) == 1
    assert not list((project.tmp / "workers" / "w" / "spool" / "pending").glob("*.json"))
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0


@pytest.mark.parametrize("project", [{"lease_seconds": 60, "time_budget": 10}], indirect=True)
def test_spooled_result_survives_worker_kill_and_is_resent_on_restart(project: Project) -> None:
    worker = project.worker("w")
    project.wait_training(1, worker)
    project.server.stop()
    spooled = worker.wait_for_log(r"experiment 1: \w+, val_bpb .*; result (\S+) spooled", timeout=120)
    state = str(project.tmp / "workers" / "w")
    assert len(processes_mentioning(state)) > 1  # the worker and the spare sandbox for its next run
    worker.signal(signal.SIGKILL)
    worker.wait(timeout=10)
    # The spare dies with its worker too.
    wait_until(lambda: not processes_mentioning(state), 10, "the killed worker's spare sandbox to end")

    project.server.start()
    again = project.worker("w")  # same name, same state folder
    again.wait_for_log(r"resending 1 result\(s\) spooled by an earlier run", timeout=30)
    done = project.final(1)
    assert done.attempts == 1  # not run again: the spooled result was delivered
    ((result_id, _),) = results_of(project, 1)
    assert result_id == spooled.group(1)
    assert again.claimed() == []


def test_two_workers_many_experiments_each_runs_once_and_best_only_improves(project: Project) -> None:
    with project.agent() as agent:
        ids = [1] + [agent.submit(f"lr {lr}", train_py=bigram(lr)).id for lr in (0.02, 0.2, 0.4)]
    workers = [project.worker("a"), project.worker("b")]
    # A change still queued when the best moves is re-applied onto the new best instead of running
    # (server/flows/decisions.py, reapply_before_running). Whether that happens depends on which run ends
    # first, so the experiments it queues are followed too.
    finals: dict[int, ExperimentOut] = {}
    pending = list(ids)
    while pending:
        i = pending.pop(0)
        experiment = finals[i] = project.final(i, timeout=300)
        if experiment.rebased_to is not None and experiment.rebased_to not in finals:
            pending.append(experiment.rebased_to)

    ran = [i for i, experiment in finals.items() if experiment.attempts]
    for i in set(finals) - set(ran):  # re-applied before it ran: no lease, no result
        assert finals[i].status in ("rebased", "stale") and finals[i].rebased_from is None, i
        assert not results_of(project, i) and not leases_of(project, i)
    claims = workers[0].claimed() + workers[1].claimed()
    assert sorted(claims) == sorted(ran)  # every experiment that ran, ran exactly once
    assert set(ids) - set(ran) <= {3, 4}  # only changes queued behind another can be re-applied
    assert all(w.claimed() for w in workers)  # and both workers took part
    for i in ran:
        assert finals[i].attempts == 1
        assert len(results_of(project, i)) == 1
        assert [state for _, state, _ in leases_of(project, i)] == ["finished"]
    # No experiment was leased to two workers at once: every lease is the only one of its experiment.
    assert project.query("SELECT experiment_id FROM leases GROUP BY experiment_id HAVING count(*) > 1") == []

    with project.agent() as agent:
        lineage = agent.leaderboard().lineage
    bpbs = [entry.val_bpb for entry in sorted(lineage, key=lambda entry: entry.finished_at)]
    assert bpbs == sorted(bpbs, reverse=True) and len(set(bpbs)) == len(bpbs)  # best only moved forward
    for i, experiment in finals.items():
        before = experiment.best_before
        if experiment.status == "kept" and before and before.val_bpb is not None:
            assert experiment.val_bpb < before.val_bpb, i
    # After whole runs, a worker on the CPU has still not loaded torch itself: only its sandboxes
    # and scorers do (its start and its memory stay small).
    for worker in workers:
        assert worker.proc is not None
        maps = Path(f"/proc/{worker.proc.pid}/maps").read_text()
        assert "libtorch" not in maps, worker.name
