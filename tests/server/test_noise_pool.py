"""The pooled noise estimate alone (server/rules/noise_pool.py): calibrated on Gaussian noise, robust to
a far-off run, equal to the classical estimate where nothing is far off; and a best's value, the
mean of its runs with each bounded near their median, which one far run cannot pin."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.rules.noise_pool import BOUND, bounded_mean, pool

SIGMA = 0.0008


def classical(groups: list[list[float]]) -> float:
    several = [g for g in groups if len(g) >= 2]
    sum_sq = sum(sum((v - sum(g) / len(g)) ** 2 for v in g) for g in several)
    return math.sqrt(sum_sq / sum(len(g) - 1 for g in several))


def gaussian_groups(seed: int, commits: int, runs: tuple[int, ...] = (2, 3, 4, 5)) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [
        list(1.0 + rng.normal() * 0.01 + SIGMA * rng.standard_normal(int(rng.choice(runs))))
        for _ in range(commits)
    ]


def test_nothing_is_said_before_a_commit_has_two_runs() -> None:
    assert pool([]) is None
    assert pool([[1.0], [1.1]]) is None


def test_the_counts_are_those_of_the_commits_with_several_runs() -> None:
    pooled = pool([[1.0], [1.0, 1.002], [0.9, 0.901, 0.899]])
    assert pooled is not None
    assert (pooled.df, pooled.runs, pooled.commits) == (1 + 2, 5, 2)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_without_far_runs_it_is_the_classical_pooled_estimate(seed: int) -> None:
    groups = gaussian_groups(seed, commits=30)
    pooled = pool(groups)
    assert pooled is not None
    assert pooled.sigma == pytest.approx(classical(groups), rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_it_estimates_sigma_on_gaussian_noise(seed: int) -> None:
    """600 commits of 2 to 5 runs (about 1,500 degrees of freedom): within 10 % of sigma, where
    its standard error is under 2 %."""
    pooled = pool(gaussian_groups(seed, commits=600))
    assert pooled is not None
    assert pooled.sigma / SIGMA == pytest.approx(1.0, abs=0.1)


def test_it_is_unbiased_on_gaussian_noise_on_average() -> None:
    ratios = [pool(gaussian_groups(seed, commits=100)).sigma / SIGMA for seed in range(200)]  # type: ignore[union-attr]
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("far", [10.0, 100.0, 1e4])
def test_one_far_run_does_not_blow_it_up(far: float) -> None:
    groups = gaussian_groups(7, commits=200)
    clean = pool(groups)
    groups[3][0] += far * SIGMA
    spoiled = pool(groups)
    assert clean is not None and spoiled is not None
    assert spoiled.sigma < 1.1 * clean.sigma
    # The classical estimate is blown up by the same run, for the far ones.
    if far >= 100:
        assert classical(groups) > 2 * clean.sigma


def test_heavy_tails_give_about_the_standard_deviation() -> None:
    """Student-t noise with 3 degrees of freedom, scaled to standard deviation SIGMA: winsorizing
    costs a few percent of the estimate (server/rules/noise_pool.py), never a blow-up."""
    rng = np.random.default_rng(3)
    ratios = []
    for _ in range(40):
        groups = [list(1.0 + SIGMA * rng.standard_t(3, 4) / math.sqrt(3)) for _ in range(250)]
        ratios.append(pool(groups).sigma / SIGMA)  # type: ignore[union-attr]
    assert 0.88 < np.mean(ratios) < 1.0
    assert max(ratios) < 1.2


def test_runs_that_repeat_exactly_are_not_winsorized_to_nothing() -> None:
    groups = [[1.0, 1.0, 1.0, 1.0, 1.002], [1.0, 1.002]]  # most pairs differ by exactly 0
    pooled = pool(groups)
    assert pooled is not None
    assert pooled.sigma == pytest.approx(classical(groups))


def test_a_commit_whose_runs_are_identical_is_left_out() -> None:
    """Its runs had their own seeds and data orders: identical ones ignore both, and would shrink
    the sigma of every decision (here to a third of the others' alone)."""
    pooled = pool([[1.0, 1.0, 1.0, 1.0], [0.7, 0.7], [1.0, 1.002], [0.9, 0.901, 0.902]])
    assert pooled is not None
    assert (pooled.commits, pooled.runs, pooled.df) == (2, 5, 3)
    assert pooled.sigma == pytest.approx(classical([[1.0, 1.002], [0.9, 0.901, 0.902]]))
    assert pool([[1.0, 1.0], [0.5, 0.5]]) is None


def bounded_by_numpy(values: list[float], sigma: float) -> float:
    """The same value computed independently, in float64 with numpy."""
    array = np.asarray(values, dtype=np.float64)
    middle = np.median(array)
    return float(np.clip(array, middle - BOUND * sigma, middle + BOUND * sigma).mean())


runs = st.lists(st.floats(0.5, 2.0), min_size=1, max_size=12)


@given(runs, st.floats(1e-6, 0.1))
def test_a_best_s_value_is_the_mean_of_its_runs_bounded_at_their_median(
    values: list[float], sigma: float
) -> None:
    assert bounded_mean(values, sigma) == pytest.approx(bounded_by_numpy(values, sigma), rel=1e-12, abs=1e-15)


@given(runs)
def test_without_a_noise_estimate_a_best_s_value_is_the_plain_mean(values: list[float]) -> None:
    assert bounded_mean(values, None) == pytest.approx(math.fsum(values) / len(values), rel=1e-12)


@given(st.integers(0, 2**32 - 1))
def test_runs_near_their_median_keep_their_plain_mean(seed: int) -> None:
    values = list(1.0 + SIGMA * np.random.default_rng(seed).uniform(-1.5, 1.5, 4))
    assert bounded_mean(values, SIGMA) == pytest.approx(float(np.mean(values)), rel=1e-12)


@given(st.integers(0, 2**32 - 1), st.floats(5.0, 1e6))
def test_one_far_run_moves_a_best_s_value_no_further_than_the_bound(seed: int, far: float) -> None:
    """However far one of four runs lies (in sigmas), it counts as BOUND sigmas from the median."""
    values = list(1.0 + SIGMA * np.random.default_rng(seed).uniform(-1.0, 1.0, 4))
    near = bounded_mean([*values[:3], values[3] - 5 * SIGMA], SIGMA)
    assert bounded_mean([*values[:3], values[3] - far * SIGMA], SIGMA) == pytest.approx(near, rel=1e-12)
    assert bounded_mean([*values[:3], values[3] - far * SIGMA], SIGMA) > np.mean(values) - (1 + BOUND) * SIGMA


def test_parameters_fitted_on_the_runs_take_their_degrees_of_freedom() -> None:
    """Workers' offsets fitted on the same runs (server/crud/noise.py, Fleet.fitted) explain part of
    their spread: each takes a degree of freedom, and none left means no estimate."""
    groups = [[1.0, 1.002, 0.998], [2.0, 2.004]]
    plain, fitted = pool(groups), pool(groups, fitted=1)
    assert plain is not None and fitted is not None
    assert (plain.df, fitted.df) == (3, 2)
    assert fitted.sigma == pytest.approx(plain.sigma * math.sqrt(3 / 2))
    assert pool(groups, fitted=3) is None
