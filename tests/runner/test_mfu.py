"""The MFU figure: the model's own FLOPs per token (else 6 per parameter) over the tokens the
feeder served, against the device's bf16 peak. A count the sandbox forges is not believed."""

from __future__ import annotations

import math

import pytest

from harness.runner.devices import flops_per_token, mfu_percent
from harness.runner.train_phase import TrainOutcome, handle


def test_mfu_is_the_declared_count_over_the_served_tokens_against_the_peak() -> None:
    # 2e9 FLOPs per token, 1,000 tokens in 4 s against a 1e12 FLOP/s peak: 2e12 / 4e12 = 50 %.
    assert mfu_percent(flops_per_token(2e9, 10**6), 1000, 4.0, 1e12) == pytest.approx(50.0)
    # Without a declared count, 6 per parameter: 6 x 1e6 x 1000 / 4e12 = 0.15 %.
    assert mfu_percent(flops_per_token(None, 10**6), 1000, 4.0, 1e12) == pytest.approx(0.15)
    assert mfu_percent(flops_per_token(2e9, 10**6), 1000, 4.0, None) is None  # no known peak


@pytest.mark.parametrize("forged", [1e16, 0.5, -3.0, math.inf, math.nan, "1e9", True, None, [1e9]])
def test_a_forged_or_absurd_count_falls_back_to_six_per_parameter(forged: object) -> None:
    outcome = TrainOutcome()
    handle({"ev": "stats", "steps": 1, "tokens": 1, "flops_per_token": forged}, 0.0, outcome)
    assert outcome.flops_per_token is None


def test_a_plausible_count_is_kept() -> None:
    outcome = TrainOutcome()
    handle({"ev": "stats", "steps": 1, "tokens": 1, "flops_per_token": 2.5e8}, 0.0, outcome)
    assert outcome.flops_per_token == 2.5e8
