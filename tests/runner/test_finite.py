"""The scorer's check for NaN and infinity in logits, against torch.isfinite at every place."""

from __future__ import annotations

import pytest
import torch

from harness.runner.scoring.scorer import all_finite


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_one_bad_value_anywhere_is_found(bad: float) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=generator) * 30
    assert all_finite(logits)
    for place in range(logits.numel()):
        spoiled = logits.clone()
        spoiled.view(-1)[place] = bad
        assert not all_finite(spoiled), place
        assert all_finite(spoiled) == bool(torch.isfinite(spoiled).all())


def test_extreme_finite_values_pass() -> None:
    big = torch.finfo(torch.float32).max
    assert all_finite(torch.tensor([[[big, -big, 0.0]]]))
