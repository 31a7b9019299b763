"""The gate (server/rules/gate.py) as a rule on plain data: every small case, each against the
sentence of the rule it follows; the claims that apply it are in test_noise_decisions.py and
tests/worker."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.states import RETRYABLE_STATUSES, ExperimentStatus, Rule
from server.rules.gate import BestMeasurement, Gate, gate_for

BEST = 7
NOISE_RUNS = 3


@pytest.mark.parametrize("rule", list(Rule))
def test_every_small_case_follows_the_rule(rule: Rule) -> None:
    cases = itertools.product(list(ExperimentStatus), range(3), [None, 0, 2, 3, 4], range(3))
    for status, valid, pooled, live in cases:
        verdict = gate_for(BestMeasurement(BEST, status, valid, pooled, live), rule, NOISE_RUNS)
        # Measured: greedy, a valid run; noise-aware, the estimate rests on NOISE_RUNS runs.
        measured = valid > 0 if rule == Rule.GREEDY else pooled is not None and pooled >= NOISE_RUNS
        case = (rule, status, valid, pooled, live)
        assert verdict.measured == measured, case
        if measured:
            assert verdict.only is None, case  # open for good
        elif live:
            assert verdict.only == BEST, case  # only the best's runs while it has any
        elif valid == 0 and status in RETRYABLE_STATUSES:
            assert verdict.only == BEST, case  # its runs lost their workers: shut until it is queued again
        else:
            assert verdict.only is None, case  # compared on its valid runs, or cannot be measured


def test_without_a_best_anything_may_run_and_the_gate_does_not_stay_open() -> None:
    for rule in Rule:
        assert gate_for(None, rule, NOISE_RUNS) == Gate(only=None, measured=False)


measurements = st.builds(
    BestMeasurement,
    experiment_id=st.integers(1, 10**6),
    status=st.sampled_from(list(ExperimentStatus)),
    valid_runs=st.integers(0, 50),
    noise_runs=st.none() | st.integers(0, 50),
    live_runs=st.integers(0, 50),
)


@given(best=measurements, rule=st.sampled_from(list(Rule)), noise_runs=st.integers(1, 10))
def test_it_names_no_experiment_but_the_best_and_more_runs_never_unmeasure_it(
    best: BestMeasurement, rule: Rule, noise_runs: int
) -> None:
    verdict = gate_for(best, rule, noise_runs)
    assert verdict.only in (None, best.experiment_id)
    more = BestMeasurement(
        best.experiment_id,
        best.status,
        best.valid_runs + 1,
        (best.noise_runs or 0) + 1,
        best.live_runs,
    )
    assert gate_for(more, rule, noise_runs).measured or not verdict.measured
