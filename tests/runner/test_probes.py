"""The causality probe's rows and distance (harness.runner.scorer)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.runner.scorer import max_tv_distance, plan_probes


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(2, 40), seq_len=st.integers(2, 80), vocab=st.integers(2, 50), seed=st.integers(0, 2**32)
)
def test_probe_rows_keep_the_prefix_and_change_the_token_at_the_cut(rows, seq_len, vocab, seed) -> None:
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, vocab, size=(rows, seq_len))
    probes = plan_probes(inputs, 16, np.random.default_rng(seed + 1))
    assert len({probe.row for probe in probes}) == len(probes) <= min(16, rows)
    for probe in probes:
        original = inputs[probe.row]
        assert 1 <= probe.cut < seq_len
        assert (probe.tokens[: probe.cut] == original[: probe.cut]).all()
        assert probe.tokens[probe.cut] != original[probe.cut]
        suffix = probe.tokens[probe.cut :]
        donors = [
            r for r in range(rows) if r != probe.row and (inputs[r, 1 : 1 + len(suffix)] == suffix).all()
        ]
        assert donors  # real text from another row


def test_probes_are_found_on_real_looking_rows() -> None:
    inputs = np.arange(32 * 64).reshape(32, 64) % 500
    assert len(plan_probes(inputs, 16, np.random.default_rng(0))) == 16


def test_total_variation_distance() -> None:
    a = torch.log_softmax(torch.tensor([[0.0, 0.0], [5.0, -5.0]], dtype=torch.float64), dim=-1)
    assert max_tv_distance(a, a) == 0.0
    one_hot_a = torch.log(torch.tensor([[1.0, 1e-300]], dtype=torch.float64))
    one_hot_b = torch.log(torch.tensor([[1e-300, 1.0]], dtype=torch.float64))
    assert abs(max_tv_distance(one_hot_a, one_hot_b) - 1.0) < 1e-12
