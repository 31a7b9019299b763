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
    if offsets:
        # Each worker's runs less its offset (about -/+ SLOW / 2): the noise within a worker's runs.
        assert estimate.sigma == pytest.approx(0.0014, abs=0.0003) and estimate.df == 2
        assert comparison.effect == pytest.approx(0.0, abs=0.0006)
        assert answer.decision == "revert" and "screening margin" in answer.reason
    else:
        assert estimate.sigma > SLOW / 2 and estimate.df == 3  # the workers' spread counted as noise
        assert comparison.effect == pytest.approx(-0.005, abs=1e-9)
        assert answer.decision is None and "one more run" in answer.reason
