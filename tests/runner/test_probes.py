"""What the scorer shows each model process (harness.runner.score_plan) and how it judges the
answers (harness.runner.agreement): properties that must hold for any data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.runner import agreement
from harness.runner.score_plan import plan_eval, plan_probes


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(2, 40), seq_len=st.integers(2, 80), vocab=st.integers(2, 50), seed=st.integers(0, 2**32)
)
def test_probe_rows_keep_the_prefix_and_take_the_rest_from_a_row_that_is_not_probed(
    rows, seq_len, vocab, seed
) -> None:
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, vocab, size=(rows, seq_len))
    probes = plan_probes(inputs, 16, np.random.default_rng(seed + 1))
    assert len(probes) in (0, 16)  # a whole batch, or none for degenerate data
    probed = {probe.row for probe in probes}
    assert len(probed) <= min(16, rows - 1)  # distinct rows while a donor is left
    for probe in probes:
        original = inputs[probe.row]
        assert 1 <= probe.cut < seq_len
        assert (probe.tokens[: probe.cut] == original[: probe.cut]).all()
        assert probe.tokens[probe.cut] != original[probe.cut]
        suffix = probe.tokens[probe.cut :]
        donors = [
            r for r in range(rows) if r not in probed and (inputs[r, 1 : 1 + len(suffix)] == suffix).all()
        ]
        assert donors  # real text, from a row no probe comes from: no later token of a probed row


def test_probes_are_found_on_real_looking_rows() -> None:
    inputs = np.arange(32 * 64).reshape(32, 64) % 500
    assert len(plan_probes(inputs, 16, np.random.default_rng(0))) == 16


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(1, 300), batch_rows=st.integers(1, 64), seed=st.integers(0, 2**32))
def test_eval_shows_every_row_and_a_batch_of_repeats_in_whole_batches(rows, batch_rows, seed) -> None:
    order = plan_eval(rows, batch_rows, np.random.default_rng(seed))
    assert len(order) % batch_rows == 0
    assert len(order) // batch_rows == -(-rows // batch_rows) + 1  # one batch more than the rows need
    assert set(order.tolist()) == set(range(rows))
    first_batch = {}
    for slot, row in enumerate(order.tolist()):
        if row in first_batch:
            if rows >= batch_rows:  # with fewer rows than a batch, every batch mixes first and repeat
                assert slot // batch_rows > first_batch[row]  # a repeat comes in a later batch
        else:
            first_batch[row] = slot // batch_rows


@given(rows=st.integers(64, 300), seed=st.integers(0, 2**32))
def test_repeats_come_from_the_first_quarter_and_return_in_the_last(rows, seed) -> None:
    batch_rows = 16
    order = plan_eval(rows, batch_rows, np.random.default_rng(seed))
    counts = np.bincount(order, minlength=rows)
    for row in np.flatnonzero(counts > 1).tolist():
        first, last = np.flatnonzero(order == row)[[0, -1]]
        assert first < max(batch_rows, rows // 4)
        assert last >= rows - max(batch_rows, rows // 4)


def group(name: str, deviations: list[float]) -> agreement.Group:
    found = agreement.Group(name)
    found.add(np.array(deviations), np.zeros(len(deviations)), row=3)
    return found


TOLERANCE = 1e-4


@given(noise=st.lists(st.floats(-TOLERANCE / 10, TOLERANCE / 10), min_size=1, max_size=200))
def test_noise_ten_times_under_the_tolerance_always_agrees(noise) -> None:
    """Whatever its signs: the lean limit is above the largest single difference allowed as noise."""
    assert agreement.judge([group("probe", noise)], TOLERANCE) is None


def test_one_position_over_the_tolerance_is_non_causal_and_named() -> None:
    message = agreement.judge([group("repeat", [0.0, 0.0, 3 * TOLERANCE, 0.0])], TOLERANCE)
    assert message is not None
    assert "position 2 of evaluation row 3" in message and "scored early and again late" in message


@pytest.mark.parametrize("share", [0.2, 0.5, 0.99])
def test_a_lean_under_the_tolerance_at_every_position_is_non_causal(share: float) -> None:
    """A clipped lookahead or adapter: each difference inside the tolerance, all the same way."""
    message = agreement.judge([group("cut", [share * TOLERANCE] * 32)], TOLERANCE)
    assert message is not None and "lean one way" in message


def test_the_device_picks_the_tolerance() -> None:
    assert agreement.tolerance_for("cpu") == agreement.TOLERANCE_NATS["cpu"]
    assert agreement.tolerance_for("cuda:1") == agreement.TOLERANCE_NATS["cuda"]
