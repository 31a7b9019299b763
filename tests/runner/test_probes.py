"""What the scorer shows each model process (harness.runner.scoring.score_plan) and how it judges the
answers (harness.runner.scoring.agreement): properties that must hold for any data."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config import PRESETS, load_settings
from harness.runner.scoring import agreement
from harness.runner.scoring.score_plan import (
    PROBE_POWER,
    WHOLE_SHARE,
    batches_of,
    detection_power,
    plan_eval,
    plan_power,
    plan_probes,
    probe_batches,
    whole_rows,
)
from protocol.result import INTEGRITY_CLASSES


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 8), st.integers(0, 30), st.integers(2, 60)),
    vocab=st.integers(2, 50),
    donor_extra=st.integers(0, 300),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_probe_batches_never_show_a_probed_rows_token_at_its_cut_before_it_is_answered(
    shape, vocab, donor_extra, seed, data
) -> None:
    batch_rows, more_rows, seq_len = shape
    rows = batch_rows + more_rows
    head_rows = data.draw(st.integers(0, batch_rows)) if seq_len > 2 else 0  # a first batch, or none
    batches = data.draw(st.integers(1, min(seq_len - bool(head_rows), 12)))
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, vocab, size=(rows, seq_len))
    donor = rng.integers(0, vocab, size=seq_len + donor_extra)
    plan = plan_probes(inputs, batch_rows, batches, donor, np.random.default_rng(seed + 1), head_rows)
    assert len(plan) == batches + bool(head_rows)
    shown: dict[int, list[int]] = {}  # row -> the cuts of its variants shown so far
    for number, batch in enumerate(plan):
        size = head_rows if number == 0 and head_rows else batch_rows  # whole batches after the head
        assert len(batch) == size
        assert len({probe.row for probe in batch}) == size  # distinct rows in a batch
        for probe in batch:
            assert 1 <= probe.cut <= seq_len
            assert (probe.tokens[: probe.cut] == inputs[probe.row, : probe.cut]).all()
            if probe.cut == seq_len:  # shown whole: the row's last variant, testing no lookahead
                assert not probe.tests
                continue
            tail = probe.tokens[probe.cut :]
            starts = range(len(donor) - len(tail) + 1)
            assert any((donor[start : start + len(tail)] == tail).all() for start in starts)  # training text
            assert probe.tests == (probe.tokens[probe.cut] != inputs[probe.row, probe.cut])
        for probe in batch:
            # Up to and including this batch, every variant of the row ends at or before this cut:
            # none holds the row's own token at the cut, the one a lookahead would read.
            assert all(cut < probe.cut for cut in shown.get(probe.row, []))
            assert all(other.cut <= probe.cut for other in batch if other.row == probe.row)
        for probe in batch:
            shown.setdefault(probe.row, []).append(probe.cut)
    whole = [row for row, cuts in shown.items() if cuts[-1] == seq_len]
    assert len(whole) == min(whole_rows(rows), len(shown))


def test_a_plan_that_cannot_keep_rows_distinct_or_cuts_growing_is_refused() -> None:
    inputs = np.zeros((4, 8), dtype=np.int64)
    donor = np.arange(100)
    with pytest.raises(ValueError, match="distinct rows"):
        plan_probes(inputs, 5, 1, donor, np.random.default_rng(0))  # more rows per batch than rows
    with pytest.raises(ValueError, match="distinct rows"):
        plan_probes(inputs, 2, 9, donor, np.random.default_rng(0))  # more batches than cuts per row


@settings(max_examples=200, deadline=None)
@given(positions=st.integers(1, 300), data=st.data(), share=st.floats(0.0, 0.99))
def test_detection_power_is_the_exact_hypergeometric_chance(positions, data, share) -> None:
    """Against the exact count of the ways to place the tested positions and miss the cheated ones."""
    tested = data.draw(st.integers(0, positions))
    cheated = math.floor(share * positions)
    exact = 1 - Fraction(math.comb(positions - cheated, tested), math.comb(positions, tested))
    expected = 0.0 if cheated == 0 or tested == 0 else float(exact)
    assert detection_power(tested, positions, share) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_presets_probe_is_the_smallest_that_reaches_the_power(preset: str) -> None:
    settings = load_settings(preset)
    rows, seq_len = settings.eval_tokens // settings.seq_len, settings.seq_len
    batches = probe_batches(rows, seq_len, settings.eval_batch_rows, settings.probe_share)
    positions, whole = rows * (seq_len - 1), whole_rows(rows)
    tested = batches * settings.eval_batch_rows - whole  # rows shown whole test no lookahead
    assert detection_power(tested, positions, settings.probe_share) >= PROBE_POWER
    fewer = tested - settings.eval_batch_rows
    assert detection_power(fewer, positions, settings.probe_share) < PROBE_POWER
    assert detection_power(whole, rows, WHOLE_SHARE) >= PROBE_POWER or whole == rows
    assert whole == rows or detection_power(whole - 1, rows, WHOLE_SHARE) < PROBE_POWER


@pytest.mark.parametrize("preset", list(PRESETS))
def test_drawn_plans_reach_the_power_at_each_presets_shapes(preset: str) -> None:
    """Over drawn plans, with tokens whose donor text can equal the row's at the cut (a variant
    that then tests nothing): each plan's own power, from the positions it does test."""
    settings = load_settings(preset)
    rows, seq_len = settings.eval_tokens // settings.seq_len, settings.seq_len
    batches = probe_batches(rows, seq_len, settings.eval_batch_rows, settings.probe_share)
    rng = np.random.default_rng(7)
    inputs = rng.integers(0, 300, size=(rows, seq_len), dtype=np.int32)  # a small vocabulary: ties happen
    donor = rng.integers(0, 300, size=1 << 20, dtype=np.int32)
    for seed in range(10):
        plan = plan_probes(inputs, settings.eval_batch_rows, batches, donor, np.random.default_rng(seed))
        assert plan_power(plan, rows, seq_len, settings.probe_share) >= PROBE_POWER


@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(1, 300),
    batch_rows=st.integers(1, 64),
    head_rows=st.integers(0, 3),
    seed=st.integers(0, 2**32),
)
def test_eval_shows_every_row_and_a_batch_of_repeats_in_whole_batches(
    rows, batch_rows, head_rows, seed
) -> None:
    head_rows = min(head_rows, rows)
    order = plan_eval(rows, batch_rows, np.random.default_rng(seed), head_rows)
    batches = batches_of(order, batch_rows, head_rows)
    assert np.array_equal(np.concatenate(batches), order)
    full = batches[1:] if head_rows else batches
    assert [len(batch) for batch in batches[:1]] == [head_rows or batch_rows]
    assert all(len(batch) == batch_rows for batch in full)
    assert len(full) == -(-rows // batch_rows) + 1  # one batch more than the rows need
    assert set(order.tolist()) == set(range(rows))
    first_batch = {}
    for number, batch in enumerate(batches):
        for row in batch.tolist():
            if row in first_batch:
                if rows >= batch_rows or first_batch[row] == 0 < head_rows:
                    assert number > first_batch[row]  # a repeat comes in a later batch
            else:
                first_batch[row] = number
    # The head's rows are shown again: training after the first answer changes their second one.
    counts = np.bincount(order, minlength=rows)
    assert all(counts[row] >= 2 for row in order[:head_rows].tolist())


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


@given(
    sizes=st.lists(st.floats(0, TOLERANCE / 10), min_size=288, max_size=1000),
    seed=st.integers(0, 2**32 - 1),
)
def test_noise_ten_times_under_the_tolerance_with_random_signs_always_agrees(sizes, seed) -> None:
    """Noise that differs from scoring to scoring leans both ways: at a tenth of the tolerance, each
    sign a coin flip, over a group the size of the smallest a run compares (288 positions, the
    `test` preset's cut group), its mean stays far under the lean limit."""
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=len(sizes))
    assert agreement.judge([group("probe", list(signs * np.array(sizes)))], TOLERANCE) is None


@given(noise=st.lists(st.floats(-2e-6, 2e-6), min_size=1, max_size=200))
def test_one_sided_noise_of_a_float32_rounding_always_agrees(noise) -> None:
    """Whatever its signs, a difference of about one float32 rounding of a logit of 15 (2e-6 nats)
    at every position is under the lean limit (tolerance / 32)."""
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


def test_a_difference_across_batch_sizes_alone_is_batch_variant_and_no_integrity_class() -> None:
    """A row scored alone and in a full batch may round differently in bf16 on a CPU: where only
    those comparisons disagree the run is batch_variant (not scored, not an integrity event); any
    disagreement between like batches makes it non_causal, whatever the other group shows."""
    like = [group(name, [0.0] * 8) for name in ("repeat", "probe", "cut")]
    shape = group("shape", [0.0, 0.02, 0.0])
    found = agreement.verdict(like, shape, TOLERANCE)
    assert found is not None and found[0] == "batch_variant" and "float32" in found[1]
    assert "batch_variant" not in INTEGRITY_CLASSES and "non_causal" in INTEGRITY_CLASSES
    broken = [*like[:2], group("cut", [0.0, 3 * TOLERANCE])]
    found = agreement.verdict(broken, shape, TOLERANCE)
    assert found is not None and found[0] == "non_causal" and "position 1" in found[1]
    assert agreement.verdict(like, group("shape", [0.0] * 8), TOLERANCE) is None


def test_the_device_picks_the_tolerance() -> None:
    assert agreement.tolerance_for("cpu") == agreement.TOLERANCE_NATS["cpu"]
    assert agreement.tolerance_for("cuda:1") == agreement.TOLERANCE_NATS["cuda"]
