"""Decisions on a fleet whose workers read differently (docs/api.md, "Decisions"): each run is
corrected by its worker's offset, fitted on the track's runs of known code only.

Through a live server with simulated workers that report the values a test chooses: `slow` reads
SLOW worse than `fast` on every run, as a GPU a few percent slower does at a fixed time budget.
"""

from __future__ import annotations

import pytest

from tests.server.conftest import SimWorker

SLOW = 0.01  # what the slow worker adds to every run: 5 sigma of the noise below
FLEET = {
    "decision_rule": "noise_aware",
    "noise_runs": 4,
    "best_repeats": 2,
    "best_rerun_every": 0,
}


def measure_baseline(fast: SimWorker, slow: SimWorker) -> None:
    """The baseline's four runs, two on each worker: 1.000 and 1.002 as read by the fast one."""
    for worker, value in ((fast, 1.0), (slow, 1.0 + SLOW), (fast, 1.002), (slow, 1.002 + SLOW)):
        worker.run_next(value)


@pytest.mark.parametrize("offsets", [True, False])
def test_a_null_change_on_the_fast_worker_is_compared_like_with_like(
    live_factory, worker_factory, baseline_source: str, offsets: bool
) -> None:
    """The baseline measured on both workers reads 1.006 on average; a do-nothing change run on
    the fast worker reads 1.001, 5 sigma better than that without offsets (a promising first
    run, given a confirmation run), and exactly the baseline's level once its worker's offset is
    taken off (reverted at once)."""
    live = live_factory(**FLEET, worker_offsets=offsets)
    fast, slow = worker_factory(live, "fast"), worker_factory(live, "slow")
    measure_baseline(fast, slow)
    agent = live.client("agent")
    (estimate,) = agent.noise().estimates
    null = agent.submit("a comment", train_py=baseline_source + "# a comment\n")
    answer = fast.run_next(1.001)
    assert answer.experiment_id == null.id
    comparison = agent.experiment(null.id).comparison
    assert comparison is not None
    # Agents see where, when and how fast the best was measured.
    measured_on = agent.best().measured_on
    assert measured_on is not None and measured_on.startswith("4 runs on fast, slow, ")
    if offsets:
        # Each worker's runs less its offset (about -/+ SLOW / 2): the noise within a worker's runs.
        assert estimate.sigma == pytest.approx(0.0014, abs=0.0003) and estimate.df == 2
        assert estimate.offsets["slow"] - estimate.offsets["fast"] == pytest.approx(SLOW, rel=0.1)
        assert comparison.effect == pytest.approx(0.0, abs=0.0006)
        assert answer.decision == "revert" and "screening margin" in answer.reason
        assert f"; best measured: {measured_on}" in answer.reason
    else:
        assert estimate.offsets == {}
        assert estimate.sigma > SLOW / 2 and estimate.df == 3  # the workers' spread counted as noise
        assert comparison.effect == pytest.approx(-0.005, abs=1e-9)
        assert answer.decision is None and "one more run" in answer.reason


def test_each_worker_runs_the_best_first_and_every_fourth_run(
    live_factory, worker_factory, baseline_source: str
) -> None:
    """Calibration runs (CALIBRATE_EVERY=4): a worker's first run of the track, and every 4th after,
    is a run of the best, so every worker has runs of known code to fit its offset on."""
    live = live_factory(**FLEET)
    fast, slow = worker_factory(live, "fast"), worker_factory(live, "slow")
    measure_baseline(fast, slow)  # runs 0 and 1 of each: the baseline's (the gate)
    agent = live.client("agent")
    ideas = [agent.submit(f"idea {i}", train_py=baseline_source + f"# idea {i}\n").id for i in range(3)]
    joined = worker_factory(live, "joined").claim()  # its first run of the track
    assert joined is not None and joined.experiment_id == 1
    claims = [fast.claim() for _ in range(3)]  # its runs 2, 3 and 4
    assert [c.experiment_id for c in claims if c is not None] == [ideas[0], ideas[1], 1]
    runs = agent.experiment(1).runs
    assert [(r.number, r.kind, r.state) for r in runs[4:]] == [
        (5, "repeat", "running"),
        (6, "repeat", "running"),
    ]
    assert slow.claim() is not None and slow.claim() is None  # idea 2, then nothing queued: no calibration


def test_a_run_far_worse_than_its_reference_is_run_again_at_most_twice(
    live_factory, worker_factory, baseline_source: str
) -> None:
    """With RERUN_SLOWED_SIGMA at 3 (off by default), a run more than 3 pooled sigma worse than the
    best is presumed slowed: recorded, not counted, and run again; after two such re-runs the next
    run counts, so a change that is truly that bad is still reverted, and its decision says so."""
    live = live_factory(**FLEET, rerun_slowed_sigma=3.0)
    worker = worker_factory(live)
    for value in (1.0, 1.002, 0.998, 1.0):  # sigma about 0.0016
        worker.run_next(value)
    agent = live.client("agent")
    bad = agent.submit("a bad change", train_py=baseline_source + "# bad\n")
    answers = [worker.run_next(1.02) for _ in range(3)]
    assert [a.status for a in answers] == ["queued", "queued", "reverted"]
    assert (
        answers[0].reason.startswith("run 1 read +0.0200 (")
        and "presumed slowed, not counted" in answers[0].reason
    )
    assert answers[1].reason.endswith("run again (re-run 2 of at most 2)")
    assert answers[2].reason.endswith("(2 runs presumed slowed, run again)")
    view = agent.experiment(bad.id)
    assert [(r.number, r.kind, r.state) for r in view.runs] == [
        (1, "first", "slowed"),
        (2, "first", "slowed"),
        (3, "first", "finished"),
    ]
    assert view.valid_runs == 1


def test_a_slowed_repeat_of_the_best_does_not_pin_its_value(live_factory, worker_factory) -> None:
    """The best's own runs are checked against its value: a slowed repeat is run again, and the
    noise and the best's value rest on the runs that were not slowed."""
    live = live_factory(**FLEET, rerun_slowed_sigma=3.0)
    worker = worker_factory(live)
    for value in (1.0, 1.002, 0.998):
        worker.run_next(value)
    answer = worker.run_next(1.05)
    assert "presumed slowed" in answer.reason and "against the best 1.0000" in answer.reason
    worker.run_next(1.0)
    best = live.client("agent").best()
    assert (best.runs, best.val_bpb) == (4, pytest.approx(1.0))
