"""The near-miss rule alone (server/rules/near_misses.py): which reverted experiments measured a gain,
and their order by evidence; with hypothesis, the rule's properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.rules.near_misses import Measured, near_misses


def test_a_gain_is_a_near_miss_a_loss_never_and_the_strongest_evidence_comes_first() -> None:
    found = near_misses(
        [
            Measured(1, effect=-0.0030, se=0.0020, runs=2, reference_runs=5),  # z -1.5
            Measured(2, effect=-0.0004, se=0.0001, runs=4, reference_runs=5),  # z -4: small, precise
            Measured(3, effect=+0.0005, se=0.0010, runs=1, reference_runs=5),  # worse, within the noise
            Measured(4, effect=+0.0030, se=0.0010, runs=1, reference_runs=5),  # worse by 3 se
            Measured(5, effect=0.0, se=0.0010, runs=1, reference_runs=5),  # no change measured
            Measured(6, effect=-0.0010, se=0.0, runs=2, reference_runs=5),  # no noise stated: no evidence
        ],
        noise_sigma=None,
    )
    assert [n.experiment_id for n in found] == [2, 1]
    first, second = found
    assert (first.z, second.z, first.pooled_se) == (pytest.approx(-4.0), pytest.approx(-1.5), False)


def test_a_greedy_decision_gets_its_se_from_the_pooled_noise_and_none_without_it() -> None:
    greedy = [Measured(7, effect=-0.001, se=None, runs=1, reference_runs=1)]
    assert near_misses(greedy, noise_sigma=None) == []
    (found,) = near_misses(greedy, noise_sigma=0.002)
    assert found.pooled_se and found.se == pytest.approx(0.002 * math.sqrt(2))
    assert found.z == pytest.approx(-0.001 / (0.002 * math.sqrt(2)))


def test_ties_put_the_larger_gain_then_the_newer_first() -> None:
    same_z = [Measured(1, -0.001, 0.001, 2, 2), Measured(2, -0.002, 0.002, 2, 2)]
    assert [n.experiment_id for n in near_misses(same_z, None)] == [2, 1]
    same = [Measured(1, -0.001, 0.001, 2, 2), Measured(3, -0.001, 0.001, 2, 2)]
    assert [n.experiment_id for n in near_misses(same, None)] == [3, 1]


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


@given(MEASURED, st.one_of(st.none(), st.floats(0.0001, 0.01)))
def test_the_rule_is_a_gain_with_a_stated_noise_and_the_order_is_z(
    measured: list[Measured], noise_sigma: float | None
) -> None:
    found = near_misses(measured, noise_sigma)
    chosen = {n.experiment_id for n in found}
    for m in measured:
        pooled = noise_sigma * math.sqrt(1 / m.runs + 1 / m.reference_runs) if noise_sigma else None
        se = m.se if m.se is not None else pooled
        assert (m.experiment_id in chosen) == (se is not None and se > 0 and m.effect < 0)
    assert all(n.effect < 0 < n.se and n.z == n.effect / n.se for n in found)
    assert [n.z for n in found] == sorted(n.z for n in found)


@given(MEASURED, st.floats(0.0001, 0.01))
def test_a_measured_noise_only_adds_greedy_decisions(measured: list[Measured], noise_sigma: float) -> None:
    stated = {n.experiment_id for n in near_misses(measured, None)}
    pooled = {n.experiment_id for n in near_misses(measured, noise_sigma)}
    assert stated <= pooled
    assert all(m.se is None for m in measured if m.experiment_id in pooled - stated)
