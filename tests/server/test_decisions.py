"""Keep, revert, rebase and stale, including results that arrive together (SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
import random
import subprocess
import threading
import time
from collections import Counter

import pytest
from sqlalchemy import update

from server.models import Experiment
from server.trainpy.carry import carried


def git(live, *args: str) -> str:
    repo = str(live.settings.resolved_research_repo)
    return subprocess.run(
        ["git", "-C", repo, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_keep_revert_and_reasons(live, worker_factory, baseline_source: str) -> None:
    worker, agent = worker_factory(live), live.client("agent")
    assert worker.run_next(1.0).decision == "keep"
    sources = [baseline_source.replace("DEPTH = 4", f"DEPTH = {d}") for d in (5, 6, 7, 8)]
    ids = [agent.submit(f"depth {i}", train_py=s).id for i, s in enumerate(sources)]
    small = worker.run_next(0.9996)  # better, but not by more than MIN_DELTA (0.0005)
    assert small.decision == "revert" and small.reason == "0.9996 >= best 1.0000 - 0.0005"
    crash = worker.run_next(None, status="crash", error_class="train_error")
    assert crash.decision == "revert" and "crash (train_error)" in crash.reason
    kept = worker.run_next(0.98)
    assert kept.model_dump() == {
        "experiment_id": ids[2],
        "run": 1,
        "decision": "keep",
        "status": "kept",
        "reason": "0.9800 < best 1.0000 - 0.0005",
    }
    best = agent.best()
    assert (best.experiment_id, best.val_bpb, best.train_py) == (ids[2], 0.98, sources[2])
    [decided] = agent.wait(ids[2], timeout=5)
    assert decided.decision == "keep"
    assert [e.id for e in agent.wait(ids[3], ids[2], ids[1], timeout=5)] == [ids[2], ids[1]]  # any of several
    with pytest.raises(TimeoutError, match="still queued"):
        agent.wait(ids[3], timeout=0.2, poll_s=0.05)
    assert git(live, "rev-parse", "best") == best.commit
    # The last one, queued on the baseline, never runs there: its change goes onto the new best
    # first, where it no longer applies (both set DEPTH).
    assert worker.claim() is None
    late = agent.experiment(ids[3])
    assert (late.status, late.decision, late.runs[0].state) == ("stale", "stale", "cancelled")
    assert late.reason.startswith("the best moved before it ran (from ")
    assert "its change does not apply to the new best" in late.reason
    lineage = agent.leaderboard().lineage
    assert [entry.experiment_id for entry in lineage] == [1, ids[2]]
    assert lineage[1].improvement == pytest.approx(0.02)


def test_results_from_another_platform_or_harness_are_not_compared(
    live, worker_factory, baseline_source: str
) -> None:
    worker = worker_factory(live)
    worker.run_next(1.0)
    agent = live.client("agent")
    agent.submit("a", train_py=baseline_source + "# a\n")
    agent.submit("b", train_py=baseline_source + "# b\n")
    other_device = worker.run_next(0.5, device="NVIDIA H100")
    other_harness = worker.run_next(0.5, harness_id="another")
    assert other_device.decision == other_harness.decision == "revert"
    assert "not compared" in other_device.reason and "not compared" in other_harness.reason
    assert agent.best().experiment_id == 1


def test_a_broken_baseline_lets_the_first_valid_result_become_the_best(
    live, worker_factory, baseline_source
) -> None:
    worker = worker_factory(live)
    assert worker.run_next(None, status="crash", error_class="syntax_error").decision == "revert"
    live.client("agent").submit("fix", train_py=baseline_source + "# fixed\n")
    answer = worker.run_next(2.5)
    assert answer.decision == "keep" and "the best has no valid run" in answer.reason


def test_best_moved_while_it_ran_rebases_or_goes_stale(live, worker_factory, baseline_source: str) -> None:
    worker, agent = worker_factory(live), live.client("agent")
    worker.run_next(1.0)
    deeper = baseline_source.replace("DEPTH = 4", "DEPTH = 6")
    wider = baseline_source + "WIDTH = 128  # far enough from DEPTH to apply on top of it\n"
    depth_clash = baseline_source.replace("DEPTH = 4", "DEPTH = 2")
    first = agent.submit("deeper", train_py=deeper)
    second = agent.submit("wider", train_py=wider)
    agent.submit("shallower", train_py=depth_clash)
    later = agent.submit("later", train_py=baseline_source + "# later\n")
    claims = [worker.claim() for _ in range(3)]  # all three run on the baseline at once
    assert worker.report(claims[0], 0.95).decision == "keep"
    rebased = worker.report(claims[1], 0.96)
    assert rebased.decision == "rebase" and "re-applied onto the new best" in rebased.reason
    stale = worker.report(claims[2], 0.97)
    assert stale.decision == "stale" and "does not apply" in stale.reason
    moved = agent.experiment(second.id)
    requeued = agent.experiment(moved.rebased_to)
    assert requeued.rebased_from == second.id and requeued.base == agent.experiment(first.id).commit
    assert agent.diff(requeued.id).count("+WIDTH = 128") == 1
    assert git(live, "show", f"{requeued.commit}:train.py") + "\n" == deeper + wider[len(baseline_source) :]
    # The re-applied change keeps its place in the queue: it runs before what was submitted later.
    assert worker.claim().experiment_id == requeued.id
    assert agent.experiment(later.id).queue_position == 0


def test_a_claim_carries_a_change_onto_the_new_best_before_it_runs(
    live_any_db, worker_factory, baseline_source: str
) -> None:
    """A first run queued on a former best is not handed out: its change goes onto the new best
    and the claim hands out the re-applied experiment instead. The change was carried onto the
    new best in the background right after the keep, and the rebase under the lock finds it done
    (server/trainpy/carry.py)."""
    live = live_any_db
    worker, agent = worker_factory(live), live.client("agent")
    worker.run_next(1.0)
    deeper = baseline_source.replace("DEPTH = 4", "DEPTH = 6")
    kept = agent.submit("deeper", train_py=deeper)
    wider = agent.submit("wider", train_py=baseline_source + "WIDTH = 128\n")
    carried.cache_clear()
    assert worker.run_next(0.95).decision == "keep"
    deadline = time.monotonic() + 10
    while carried.cache_info().currsize == 0:  # carried in the background after the keep
        assert time.monotonic() < deadline, "the change queued on the former best was not carried"
        time.sleep(0.02)
    claim = worker.claim()
    assert claim is not None and claim.experiment_id not in (kept.id, wider.id)
    moved = agent.experiment(wider.id)
    assert (moved.status, moved.runs[0].state) == ("rebased", "cancelled")
    assert moved.reason.startswith("the best moved before it ran (from ")
    assert moved.rebased_to == claim.experiment_id
    assert claim.train_py == deeper + "WIDTH = 128\n"
    assert agent.experiment(claim.experiment_id).base == agent.experiment(kept.id).commit
    assert (
        git(live, "rev-parse", f"refs/experiments/{claim.experiment_id}")
        == agent.experiment(claim.experiment_id).commit
    )
    carries = carried.cache_info()
    assert (carries.misses, carries.hits) == (1, 1)  # made once, in the background; used by the claim


def test_carrying_ahead_goes_on_past_a_change_it_cannot_carry(
    live, worker_factory, baseline_source: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After a keep the server carries every change queued on the former best (decisions.carry_ahead).
    One it cannot carry, here because its base commit is gone from the research repo, is logged,
    and the changes queued after it are carried all the same."""
    worker, agent = worker_factory(live), live.client("agent")
    worker.run_next(1.0)
    agent.submit("deeper", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 6"))
    lost = agent.submit("lost base", train_py=baseline_source + "LOST = 1\n")
    wider = agent.submit("wider", train_py=baseline_source + "WIDTH = 128\n")
    with live.ctx.db.write() as session:  # queued first, so it is carried first
        session.execute(update(Experiment).where(Experiment.id == lost.id).values(base_commit="0" * 40))
    carried.cache_clear()
    with caplog.at_level(logging.ERROR, logger="server.flows.decisions"):
        assert worker.run_next(0.95).decision == "keep"
        deadline = time.monotonic() + 10
        while carried.cache_info().currsize == 0:
            assert time.monotonic() < deadline, "the change queued after the lost one was not carried"
            time.sleep(0.02)
    lost_commit, wider_commit = agent.experiment(lost.id).commit, agent.experiment(wider.id).commit
    failures = [r for r in caplog.records if lost_commit in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert [key for key in carried.cache if wider_commit in key] and len(carried.cache) == 1


def _report_together(workers: list, claims: list[dict], values: list[float]) -> list[dict]:
    """Every worker reports its result at the same moment (threads released by one barrier)."""
    barrier = threading.Barrier(len(workers))
    answers: list[dict] = [{}] * len(workers)

    def report(i: int) -> None:
        barrier.wait()
        answers[i] = workers[i].report(claims[i], values[i])

    threads = [threading.Thread(target=report, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_results_arriving_together_never_both_advance_best(
    live_any_db, worker_factory, baseline_source: str
) -> None:
    live = live_any_db
    agent = live.client("agent")
    workers = [worker_factory(live, f"gpu{i}") for i in range(6)]
    workers[0].run_next(1.0)
    for round_number in range(3):
        best_before = agent.best().commit
        for i in range(len(workers)):
            # Each edits its own line, so every change also applies on top of any other.
            agent.submit(
                f"r{round_number} w{i}",
                train_py=agent.best().train_py + f"# round {round_number} idea {i}\n",
            )
        claims = [w.claim() for w in workers]
        assert all(c is not None for c in claims)
        answers = _report_together(workers, claims, [0.9 - 0.01 * round_number - 0.001 * i for i in range(6)])
        decisions = Counter(a.decision for a in answers)
        assert decisions == {"keep": 1, "rebase": len(workers) - 1}, answers
        winner = next(a for a in answers if a.decision == "keep")
        best = agent.best()
        assert best.experiment_id == winner.experiment_id
        assert git(live, "rev-parse", "best^") == best_before  # one fast-forward step from the old best
        for worker in workers[1:]:  # run the re-queued ones away for the next round
            worker.run_next(5.0)
    kept = [e.experiment_id for e in agent.leaderboard().lineage]
    chain = git(live, "rev-list", "--first-parent", "best").split()
    assert len(chain) == len(kept) and len(kept) == 4  # the baseline and one keep per round


def test_agent_standings_count_outcomes_and_refresh_in_the_background(
    live_factory, worker_factory, baseline_source: str
) -> None:
    live = live_factory(standings_refresh_seconds=0.1)
    worker = worker_factory(live)
    worker.run_next(1.0)
    alice, bob = live.client("agent", "alice"), live.client("agent", "bob")
    alice.submit("a1", train_py=baseline_source + "# a1\n")
    alice.submit("a2", train_py=baseline_source.replace("DEPTH = 4", "DEPTH = 5"))
    bob.submit("b1", train_py=baseline_source + "# b1\n")
    bob.submit("b2", train_py=baseline_source + "# b2\n")
    worker.run_next(0.97)  # alice keeps
    worker.run_next(None, status="crash", error_class="train_error")  # alice's crash (no valid result)
    worker.run_next(0.9999)  # bob: not better than its base
    expected = {
        "alice": {"submitted": 2, "queued": 0, "kept": 1, "reverted": 0, "failed": 1, "best_val_bpb": 0.97},
        "bob": {"submitted": 2, "queued": 1, "kept": 0, "reverted": 1, "failed": 0, "best_val_bpb": 0.9999},
    }
    deadline = time.monotonic() + 10
    while True:
        agents = {a.agent: a for a in alice.agents().agents}
        got = {name: {k: getattr(agents[name], k) for k in expected[name]} for name in expected}
        if got == expected or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert got == expected
    assert [a.agent for a in alice.leaderboard().agents] == ["alice", "bob"]
    assert agents["alice"].improvement == pytest.approx(0.03)


def test_a_change_carried_past_the_train_py_limits_goes_stale(
    live, worker_factory, baseline_source: str
) -> None:
    """Two changes that each fit the limits can make, carried one onto the other, a train.py that
    does not: here each carries half of a table spelled as names (server/trainpy/limits.py). The
    carried file is held to the limits a submitted one is, so the second goes stale."""
    worker, agent = worker_factory(live), live.client("agent")
    worker.run_next(1.0)
    rng = random.Random(7)

    def half(name: str) -> str:
        return f"\n\ndef {name}():\n" + "".join(f"    v{i:x}_{rng.randbytes(32).hex()}\n" for i in range(400))

    first_line, rest = baseline_source.split("\n", 1)
    head = agent.submit("first half", train_py=f"{first_line}{half('_a')}\n{rest}")
    tail = agent.submit("second half", train_py=baseline_source + half("_b"))
    assert worker.run_next(0.95).decision == "keep" and agent.best().experiment_id == head.id
    assert worker.claim() is None  # the second half was not handed out on the new best
    stale = agent.experiment(tail.id)
    assert stale.status == "stale", stale
    assert "its change on the new best is refused: the train.py holds" in stale.reason
    assert "TRAIN_PY_MAX_INFORMATION_BYTES" in stale.reason
