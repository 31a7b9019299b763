"""The near-miss rule alone (server/near_misses.py): which reverted experiments may still be better
than their reference, and their order; with hypothesis, the rule's properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.near_misses import MAX_SIGMAS, Measured, near_misses


def test_within_the_noise_or_better_is_a_near_miss_and_the_best_worst_case_comes_first() -> None:
    found = near_misses(
        [
            Measured(1, effect=-0.0030, se=0.0020, runs=2, reference_runs=5),  # upper -0.0010
            Measured(2, effect=-0.0004, se=0.0001, runs=4, reference_runs=5),  # upper -0.0003: precise
            Measured(3, effect=+0.0005, se=0.0010, runs=1, reference_runs=5),  # worse, within the noise
            Measured(4, effect=+0.0030, se=0.0010, runs=1, reference_runs=5),  # worse by 3 se: no
            Measured(5, effect=+0.0010, se=0.0010, runs=1, reference_runs=5),  # lower end exactly 0: no
        ],
        sigmas=1.0,
        noise_sigma=None,
    )
    assert [n.experiment_id for n in found] == [1, 2, 3]
    first = found[0]
    assert (first.lower, first.upper, first.pooled_se) == (
        pytest.approx(-0.005),
        pytest.approx(-0.001),
        False,
    )
    # Two standard errors: the one worse by 3 se is still out, the one worse by 1 se is in.
    wider = near_misses([Measured(4, 0.003, 0.001, 1, 5), Measured(5, 0.001, 0.001, 1, 5)], 2.0, None)
    assert [n.experiment_id for n in wider] == [5]


def test_a_greedy_decision_gets_its_se_from_the_pooled_noise_and_none_without_it() -> None:
    greedy = [Measured(7, effect=-0.001, se=None, runs=1, reference_runs=1)]
    assert near_misses(greedy, 1.0, noise_sigma=None) == []
    (found,) = near_misses(greedy, 1.0, noise_sigma=0.002)
    assert found.pooled_se and found.se == pytest.approx(0.002 * math.sqrt(2))


def test_ties_put_the_larger_effect_then_the_newer_first() -> None:
    same_upper = [Measured(1, -0.001, 0.001, 2, 2), Measured(2, -0.002, 0.002, 2, 2)]
    assert [n.experiment_id for n in near_misses(same_upper, 1.0, None)] == [2, 1]
    same = [Measured(1, -0.001, 0.001, 2, 2), Measured(3, -0.001, 0.001, 2, 2)]
    assert [n.experiment_id for n in near_misses(same, 1.0, None)] == [3, 1]


MEASURED = st.lists(
    st.builds(
        Measured,
        st.integers(1, 1000),
        st.floats(-0.05, 0.05),
        st.one_of(st.none(), st.floats(0.0, 0.02)),
        st.integers(1, 8),
        st.integers(1, 20),
    ),
    max_size=30,
    unique_by=lambda m: m.experiment_id,
)
SIGMAS = st.floats(0.01, MAX_SIGMAS)


@given(MEASURED, SIGMAS, st.one_of(st.none(), st.floats(0.0001, 0.01)))
def test_the_rule_is_the_lower_end_below_zero_and_the_order_is_the_upper_end(
    measured: list[Measured], sigmas: float, noise_sigma: float | None
) -> None:
    found = near_misses(measured, sigmas, noise_sigma)
    chosen = {n.experiment_id for n in found}
    for m in measured:
        se = (
            m.se
            if m.se is not None
            else (
                noise_sigma * math.sqrt(1 / m.runs + 1 / m.reference_runs)
                if noise_sigma is not None
                else None
            )
        )
        assert (m.experiment_id in chosen) == (se is not None and m.effect - sigmas * se < 0)
    assert all(n.lower < 0 <= n.se for n in found)
    assert [n.upper for n in found] == sorted(n.upper for n in found)


@given(MEASURED, SIGMAS, SIGMAS)
def test_more_sigmas_only_add_near_misses(measured: list[Measured], a: float, b: float) -> None:
    narrow, wide = sorted((a, b))
    few = [(n.experiment_id, n.effect) for n in near_misses(measured, narrow, 0.001)]
    many = [(n.experiment_id, n.effect) for n in near_misses(measured, wide, 0.001)]
    assert set(few) <= set(many)
