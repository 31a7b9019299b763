"""The score phase's time bound (harness.runner.scoring.score_budget): properties for any run."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.runner.scoring import score_budget
from harness.runner.scoring.model_process import ModelFailure
from harness.runner.scoring.score_budget import (
    ProcessBudget,
    forward_seconds_per_token,
    process_budget,
    startup_allowance,
    uneven_batch,
)
from harness.runner.scoring.scorer import Clock, Transfer

budgets = st.floats(min_value=0.1, max_value=1e4)
seconds = st.floats(min_value=0.01, max_value=1e4)
tokens = st.integers(min_value=1, max_value=10**12)


@given(
    device=st.sampled_from(["cpu", "cuda", "cuda:3"]),
    budget=budgets,
    trained=seconds,
    train_tokens=tokens,
    eval_tokens=tokens,
)
def test_forward_estimate_is_a_third_of_a_training_step_with_slack_and_capped(
    device, budget, trained, train_tokens, eval_tokens
) -> None:
    per_token = forward_seconds_per_token(device, budget, trained, train_tokens, eval_tokens)
    slack = score_budget.FORWARD_SLACK[device[:4]] * score_budget.FORWARD_SHARE
    assert 0 < per_token <= slack * trained / train_tokens * (1 + 1e-12)
    # However few tokens a run reports, all evaluation rows' forward passes fit in the cap.
    assert per_token * eval_tokens <= score_budget.FORWARD_CAP_FRACTION * budget * (1 + 1e-12)


@given(budget=budgets, trained=seconds, train_tokens=tokens)
def test_a_faster_training_run_gets_a_tighter_bound(budget, trained, train_tokens) -> None:
    slow = forward_seconds_per_token("cpu", budget, trained, train_tokens, 1000)
    fast = forward_seconds_per_token("cpu", budget, trained, 2 * train_tokens, 1000)
    assert fast <= slow


@pytest.mark.parametrize("train_tokens", [None, 0])
def test_a_run_that_reported_no_training_tokens_gets_no_forward_time(train_tokens) -> None:
    assert forward_seconds_per_token("cuda", 300.0, 300.0, train_tokens, 10**6) == 0.0


@given(startup=seconds, batches=st.integers(0, 1000), transfer=st.none() | seconds)
def test_bound_is_startup_plus_each_batch(startup, batches, transfer) -> None:
    budget_of = process_budget("probe", batches, 64 * 2048, 64 * 2048 * 8192 * 4, startup, 1e-6)
    bound = budget_of.bound(transfer)
    assert budget_of.startup_s == startup
    assert bound >= budget_of.startup_s
    one_more = process_budget("probe", batches + 1, 64 * 2048, 64 * 2048 * 8192 * 4, startup, 1e-6)
    assert one_more.bound(transfer) > bound
    assert f"{bound:.2f} s" in budget_of.explain(transfer)


@given(startup=seconds, batches=st.integers(1, 999), transfer=st.none() | seconds, given_=st.integers(0, 999))
def test_the_bound_grows_with_the_batches_given_so_far(startup, batches, transfer, given_) -> None:
    """Work front-loaded before the first answer (to match in every later batch) gets one batch's
    allowance however many batches follow; the whole bound only once every batch is given."""
    budget_of = process_budget("probe", batches, 64 * 2048, 64 * 2048 * 8192 * 4, startup, 1e-6)
    per_batch = (budget_of.bound(transfer) - budget_of.startup_s) / batches
    expected = budget_of.startup_s + min(max(1, given_), batches) * per_batch
    assert budget_of.bound(transfer, given_) == pytest.approx(expected, rel=1e-9)
    assert budget_of.bound(transfer, 0) == budget_of.bound(transfer, 1)
    assert budget_of.bound(transfer, batches) == budget_of.bound(transfer)


@given(device=st.sampled_from(["cuda", "cuda:1"]), budget=budgets, trained=seconds, train_tokens=tokens)
def test_on_cuda_the_startup_is_flat(device, budget, trained, train_tokens) -> None:
    """A CUDA context takes seconds whatever the model: wall seconds, the same for every run."""
    flat = max(score_budget.STARTUP_MIN_S, score_budget.STARTUP_FRACTION * budget)
    assert startup_allowance(device, budget, trained, train_tokens) == flat


@given(budget=budgets, trained=seconds, train_tokens=tokens)
def test_on_a_cpu_the_startup_is_what_training_on_a_few_tokens_costs(budget, trained, train_tokens) -> None:
    """Between the floor and the flat allowance, STARTUP_TOKENS tokens of the run's own training: what
    a candidate can hide in its startup is never more than that, or the floor."""
    startup = startup_allowance("cpu", budget, trained, train_tokens)
    flat = startup_allowance("cuda", budget, trained, train_tokens)
    tokens_worth = score_budget.STARTUP_TOKENS * trained / train_tokens
    assert score_budget.CPU_STARTUP_MIN_S <= startup <= max(flat, score_budget.CPU_STARTUP_MIN_S)
    assert startup <= max(score_budget.CPU_STARTUP_MIN_S, tokens_worth) * (1 + 1e-12)
    if score_budget.CPU_STARTUP_MIN_S <= tokens_worth <= flat:
        assert startup == pytest.approx(tokens_worth, rel=1e-12)
    # A slower run per token (a larger model) gets more, a faster one less.
    assert startup_allowance("cpu", budget, 2 * trained, train_tokens) >= startup


@pytest.mark.parametrize("train_tokens", [None, 0])
def test_a_run_served_no_training_tokens_gets_the_floor_on_a_cpu(train_tokens) -> None:
    assert startup_allowance("cpu", 60.0, 60.0, train_tokens) == score_budget.CPU_STARTUP_MIN_S


def test_startup_allowance_by_preset() -> None:
    assert startup_allowance("cuda", 300.0, 300.0, 300 * 10**6) == 6.0  # h100
    # cpu: the baseline trains on about half a million tokens in its 60 CPU seconds
    assert startup_allowance("cpu", 60.0, 60.0, 500_000) == score_budget.CPU_STARTUP_MIN_S
    # a model twenty times its size per token trains on about 25,000: 4.8 s, capped at 3
    assert startup_allowance("cpu", 60.0, 60.0, 25_000) == score_budget.STARTUP_MIN_S
    assert startup_allowance("cpu", 60.0, 60.0, 60_000) == pytest.approx(2.0)


@given(
    startup=seconds,
    batches=st.integers(1, 999),
    transfer=st.none() | seconds,
    share=st.floats(1 / 64, 1.0),
    given_=st.integers(0, 999),
)
def test_a_small_first_batch_gets_its_share_of_a_batchs_allowance(
    startup, batches, transfer, share, given_
) -> None:
    """What a model may do before its first answer is the startup and the first batch's share of a
    full batch's allowance (a CPU's first batch of one row); each later batch adds a full one."""
    sizes = ("probe", batches, 64 * 256, 64 * 256 * 4096 * 4, startup, 1e-6)
    whole, small = process_budget(*sizes), process_budget(*sizes, first_share=share)
    per_batch = (whole.bound(transfer) - whole.startup_s) / batches
    assert small.bound(transfer, 1) == pytest.approx(small.startup_s + share * per_batch, rel=1e-9)
    expected = whole.bound(transfer, given_) - (1 - share) * per_batch
    assert small.bound(transfer, given_) == pytest.approx(expected, rel=1e-9)
    if share < 1:
        assert "full batches' worth" in small.explain(transfer, given=given_)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([1, 32]), st.floats(1.0, 1.49)), min_size=1, max_size=40),
    st.floats(0.01, 0.5),
)
def test_batches_within_the_spread_of_each_other_are_never_uneven(answers, base: float) -> None:
    """However a GPU's honest batches vary, as long as each shape's stay within BATCH_SPREAD."""
    scale = {1: base / 20, 32: base}
    assert uneven_batch([(rows, scale[rows] * factor) for rows, factor in answers]) is None


def test_a_burst_beside_the_forward_pass_is_uneven_and_a_shapes_first_batch_is_not_judged() -> None:
    answers = [(1, 2.0), (32, 0.9), (32, 0.2), (32, 0.21), (32, 0.45), (32, 0.2)]
    assert uneven_batch(answers) == (5, 0.45, 0.2)  # batch 2, 0.9 s, is its size's first: not judged
    assert uneven_batch(answers[:4]) is None


def test_on_a_gpu_the_clock_stops_a_process_at_its_first_uneven_batch() -> None:
    """Wall seconds (a GPU): the clock judges each answer as it comes; in CPU seconds (exact,
    whatever the batches) it does not."""
    budget = ProcessBudget("probe", batches=10, startup_s=3.0, forward_s=1.0, logits_bytes=0)
    wall = Clock(budget, Transfer(), outer_deadline=time.monotonic() + 60)
    for seconds in (0.5, 0.2, 0.2):
        wall.answered(32, seconds)
    with pytest.raises(ModelFailure) as failure:
        wall.answered(32, 0.32)
    assert failure.value.error_class == "score_over_budget"
    assert "batch 4 took 0.320 s, more than 1.5 x the fastest batch of its size (0.200 s)" in str(
        failure.value
    )
    exact = Clock(budget, Transfer(), outer_deadline=time.monotonic() + 60, cpu=lambda: 0.0)
    for seconds in (0.5, 0.2, 0.2, 0.32):
        exact.answered(32, seconds)
