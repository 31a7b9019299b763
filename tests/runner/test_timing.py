"""Time accounting rules (harness.runner.timing): properties that must hold for any timings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.config import load_settings
from harness.runner import timing

seconds = st.floats(min_value=0.0, max_value=1e5, allow_nan=False)
first_step = st.none() | seconds


@given(first=first_step, lifetime=seconds, allowance=seconds)
def test_startup_credit_is_bounded_and_splits_the_lifetime(first, lifetime, allowance) -> None:
    credit = timing.startup_credit(first, lifetime, allowance)
    trained = timing.training_seconds(first, lifetime, allowance)
    assert 0.0 <= credit <= min(allowance, lifetime)
    assert abs(credit + trained - lifetime) <= 1e-9 * max(1.0, lifetime)
    if first is not None and first <= min(allowance, lifetime):
        assert credit == first  # the first step ends startup


@given(first=first_step, lifetime=seconds, later=seconds, allowance=seconds)
def test_training_time_never_runs_backwards(first, lifetime, later, allowance) -> None:
    assert timing.training_seconds(first, lifetime + later, allowance) >= timing.training_seconds(
        first, lifetime, allowance
    )


@given(
    budget=st.floats(min_value=0.1, max_value=1e4),
    allowance=seconds,
    floor=st.floats(min_value=0.0, max_value=10.0),
)
def test_the_hard_deadline_lies_beyond_every_run_that_is_merely_over_budget(budget, allowance, floor) -> None:
    tolerance = timing.over_budget_tolerance(budget, floor)
    assert tolerance >= floor
    assert timing.train_deadline(budget, allowance, floor) > allowance + budget + tolerance
    assert not timing.is_over_budget(budget + tolerance, budget, floor)
    assert timing.is_over_budget(budget + tolerance + 1e-6 * budget + 1e-9, budget, floor)


def test_tolerance_is_two_percent_on_the_presets_that_rank_and_the_floor_on_test() -> None:
    # 2 % of the budget on the presets that rank real changes, the same share on each (issue 50).
    for preset in ("cpu", "h100", "gpu-check"):
        settings = load_settings(preset)
        tolerance = timing.over_budget_tolerance(settings.time_budget, settings.overrun_floor_s)
        assert tolerance == pytest.approx(0.02 * settings.time_budget)
    test = load_settings("test")
    assert timing.over_budget_tolerance(test.time_budget, test.overrun_floor_s) == test.overrun_floor_s
    assert test.overrun_floor_s > 0.02 * test.time_budget
