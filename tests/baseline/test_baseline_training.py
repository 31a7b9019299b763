"""train(model, ctx) on learnable synthetic data through a real TrainContext."""

from __future__ import annotations

import math
import os
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from tests.baseline.tiny import SEQ_LEN, VOCAB, VirtualClock, load_baseline, make_ctx, successor_batches

BATCHES = 64  # the budget, in batches drawn (4 s of virtual time at 1/16 s per batch)


Run = tuple[ModuleType, torch.nn.Module, VirtualClock, list[dict[str, float]]]


@pytest.fixture(scope="module")
def run() -> Run:
    """One training run shared by the tests below: 2 micro-batches of 2 rows per optimizer step."""
    module = load_baseline(device_batch=2, total_batch_tokens=4 * SEQ_LEN)
    clock = VirtualClock(budget=BATCHES / 16, per_batch=1 / 16)
    logs: list[dict[str, float]] = []
    ctx = make_ctx(clock, logs)
    model = module.build_model(ctx)
    module.train(model, ctx)
    return module, model, clock, logs


def test_training_drives_the_loss_down_and_trains_the_model_in_place(run: Run) -> None:
    _, model, _, logs = run
    first, last = logs[0]["loss"], sum(entry["loss"] for entry in logs[-5:]) / 5
    assert first == pytest.approx(math.log(VOCAB), abs=0.5)  # near-uniform predictions at init
    assert last < 0.3 * first
    inputs, targets = next(successor_batches(VOCAB, SEQ_LEN, seed=0, rows_seed=99)(8))
    with torch.no_grad():
        held_out = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).item()
    assert held_out < 0.3 * first


def test_it_stops_when_the_clock_runs_out_and_logs_every_step(run: Run) -> None:
    _, _, clock, logs = run
    assert clock.drawn == BATCHES  # no batch drawn after time_left() reached 0
    assert [entry["step"] for entry in logs] == list(range(BATCHES // 2))  # 2 micro-batches a step
    assert all(math.isfinite(entry["loss"]) for entry in logs)
    assert all(entry["tokens_per_s"] > 0 for entry in logs)


def test_on_cpu_it_leaves_one_usable_core_to_the_loader_and_the_harness(run: Run) -> None:
    module, _, _, _ = run
    usable = len(os.sched_getaffinity(0))
    assert torch.get_num_threads() == max(1, usable - module.CPU_SPARE_CORES)


def test_the_learning_rate_follows_the_fraction_of_time_used(run: Run) -> None:
    module, _, _, logs = run
    warmdown, final = module.WARMDOWN_FRACTION, module.FINAL_LR_FRACTION
    assert module.WARMUP_FRACTION == 0.0  # the baseline starts at the full learning rate
    for entry in logs:
        used = entry["step"] * 2 / BATCHES  # the fraction of the budget used when the step began
        expected = 1.0 if used <= 1 - warmdown else final + (1 - final) * (1 - used) / warmdown
        assert entry["lr_multiplier"] == pytest.approx(expected)


def test_an_exhausted_clock_trains_nothing(train_py: ModuleType) -> None:
    clock = VirtualClock(budget=0.0, per_batch=1.0)
    logs: list[dict[str, float]] = []
    ctx = make_ctx(clock, logs)
    train_py.train(train_py.build_model(ctx), ctx)
    assert clock.drawn == 0 and logs == []


def test_a_nan_loss_fails_fast_with_a_clear_message(train_py: ModuleType) -> None:
    clock = VirtualClock(budget=100.0, per_batch=1.0)
    logs: list[dict[str, float]] = []
    ctx = make_ctx(clock, logs)
    model = train_py.build_model(ctx)
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="training loss is nan at step 0: the run diverged"):
        train_py.train(model, ctx)
    assert clock.drawn == 1 and logs == []  # failed on the first step, reported no NaN progress


def test_a_batch_size_that_does_not_divide_the_step_is_refused(train_py: ModuleType) -> None:
    bad = load_baseline(device_batch=3, total_batch_tokens=4 * SEQ_LEN)
    ctx = make_ctx(VirtualClock(1.0, 1.0), [])
    with pytest.raises(ValueError, match="total_batch_tokens 128 is not a multiple of device_batch"):
        bad.train(bad.build_model(ctx), ctx)


def test_an_unknown_device_type_is_named_in_the_error(train_py: ModuleType) -> None:
    del train_py.DEVICE_SETTINGS["cpu"]
    with pytest.raises(ValueError, match="no DEVICE_SETTINGS entry for device type 'cpu'"):
        train_py.build_model(make_ctx(VirtualClock(1.0, 1.0), []))


def test_a_compiled_model_compiles_on_dummy_tokens_before_asking_for_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Startup (free up to the harness's allowance) ends at the first batch requested: the first
    compiled call must come before it, on a batch of the training shape, and change nothing."""
    module = load_baseline(compile=True, device_batch=2, total_batch_tokens=2 * SEQ_LEN)
    clock = VirtualClock(budget=4.0, per_batch=1.0)
    ctx = make_ctx(clock, [])
    model = module.build_model(ctx)
    initial = {name: value.clone() for name, value in model.state_dict().items()}
    calls: list[dict[str, object]] = []

    def recording_compile(target: torch.nn.Module) -> object:
        def forward(idx: torch.Tensor) -> torch.Tensor:
            calls.append(
                {
                    "drawn": clock.drawn,
                    "shape": tuple(idx.shape),
                    "dummy": bool((idx == 0).all()),
                    "untouched": all(torch.equal(v, initial[k]) for k, v in model.state_dict().items()),
                    "no_grads": all(p.grad is None for p in model.parameters()),
                }
            )
            return target(idx)

        return forward

    monkeypatch.setattr(torch, "compile", recording_compile)
    module.train(model, ctx)
    clean = {"shape": (2, SEQ_LEN), "untouched": True, "no_grads": True}
    assert calls[0] == {"drawn": 0, "dummy": True, **clean}  # before any batch: dummy tokens
    # The warm-up's backward left no gradients and moved no weight into the first real step.
    assert calls[1] == {"drawn": 1, "dummy": False, **clean}
    assert len(calls) == clock.drawn + 1
