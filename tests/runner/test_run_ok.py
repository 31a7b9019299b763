"""An honest candidate, end to end: trained and scored in the real sandbox."""

from __future__ import annotations

import itertools
import math
import os
import re
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from harness.config import HarnessSettings
from harness.data_layout import prepared_paths, read_manifest
from harness.evaluate import evaluate_bpb
from harness.runner import timing
from harness.runner.scoring import score_budget
from protocol.result import ProgressEvent
from tests.runner.candidates import FOLDER, GOOD, compose
from tests.runner.conftest import STARTUP_ROOM_S


def test_honest_candidate_is_trained_scored_and_reported(settings: HarnessSettings, run_candidate) -> None:
    events: list[ProgressEvent] = []
    stamps: list[float] = []

    def record(event: ProgressEvent) -> None:
        events.append(event)
        stamps.append(time.monotonic())

    result = run_candidate(GOOD, on_progress=record)
    assert result.status == "ok", result.log_tail
    assert result.error_class is None and result.error_message is None
    assert result.sandbox is True
    ran_with = settings.model_copy(update={"compile_allowance": STARTUP_ROOM_S})
    assert result.harness_id == read_manifest(ran_with)["harness_id"]
    assert result.num_params == settings.vocab_size**2
    assert result.steps and result.steps > 0
    assert result.tokens and result.tokens >= 8 * settings.seq_len
    assert result.peak_memory_mb and result.peak_memory_mb > 50  # torch alone takes more
    assert (
        0
        < result.training_seconds
        <= settings.time_budget + timing.over_budget_tolerance(settings.time_budget, settings.overrun_floor_s)
    )
    assert 0 <= result.startup_seconds <= STARTUP_ROOM_S
    assert result.total_seconds >= result.training_seconds + result.startup_seconds
    assert result.mfu_percent is None  # no known peak FLOP/s for a CPU
    assert result.device.startswith("cpu")
    conditions = result.conditions  # the machine it ran on, read by the harness
    assert conditions is not None and (conditions.speed_gflops or 0) > 0 and conditions.load_1m is not None
    assert conditions.gpu_sm_clock_mhz is None  # no GPU
    # On a CPU the score phase is measured in CPU seconds, its bound from the training's own: the
    # train sandbox's CPU seconds while it trained (at most every core for the whole time).
    note = r"score phase \(training \d+ tokens/s, ([\d.]+) CPU s\): eval ran [\d.]+ CPU s"
    rate = re.search(note, result.log_tail)
    assert rate is not None, result.log_tail
    assert 0 < float(rate[1]) <= (result.training_seconds + 0.5) * len(os.sched_getaffinity(0))
    # The first batch is one row on a CPU: its allowance is a share of a full batch's, and the note
    # says how much of it each process used up to its first answer.
    answers = [
        (float(u), float(a))
        for u, a in re.findall(r"its first answer at ([\d.]+) of ([\d.]+)", result.log_tail)
    ]
    assert len(answers) == 2 and all(0 <= used <= allowed for used, allowed in answers), result.log_tail
    assert "full batches' worth" in result.log_tail, result.log_tail
    # A bigram model that trained at all beats the uniform distribution by a wide margin.
    uniform = math.log2(settings.vocab_size) / 1.0
    assert 0 < result.val_bpb < uniform
    # Progress: at most one event a second, phases in order (the last may be held back by the pace).
    order = {"startup": 0, "train": 1, "score": 2}
    assert [order[e.phase] for e in events] == sorted(order[e.phase] for e in events)
    assert all(later - earlier >= 0.99 for earlier, later in itertools.pairwise(stamps))
    assert any(event.phase == "train" and event.loss is not None for event in events)


COMPILER_AT_IMPORT = ["compiler_setting.py", "compiler_attribute.py", "compiled_helper.py"]


@pytest.mark.parametrize("part", [f"libraries/{name}" for name in COMPILER_AT_IMPORT])
def test_a_candidate_that_loads_torchs_compiler_at_import_is_scored(
    run_candidate, tmp_path: Path, part: str
) -> None:
    """Loading torch's compiler costs more CPU than a CPU's startup allowance: the train phase reports
    the libraries importing train.py loaded, and the score processes import them before their clocks
    start (harness.runner.preload)."""
    result = run_candidate(compose(tmp_path, part))
    assert result.status == "ok", result.log_tail
    allowed = [float(a) for a in re.findall(r"its first answer at [\d.]+ of ([\d.]+)", result.log_tail)]
    assert len(allowed) == 2 and all(a < 2 * score_budget.CPU_STARTUP_MIN_S for a in allowed), result.log_tail


def test_score_equals_evaluate_bpb_of_the_same_weights_every_time(
    settings: HarnessSettings, run_candidate
) -> None:
    """The idle candidate's weights are its seeded initialisation, so the score is known exactly,
    and a second run in the same process gives it again."""
    torch.manual_seed(settings.seed)
    model = nn.Sequential(nn.Embedding(settings.vocab_size, settings.vocab_size))
    val_dir = prepared_paths(settings).val_dir
    expected = evaluate_bpb(model, val_dir, torch.device("cpu"), settings.eval_batch_rows)
    for _ in range(2):
        result = run_candidate(FOLDER / "no_training.py", time_budget=1.0)
        assert result.status == "ok", result.log_tail
        assert result.val_bpb == pytest.approx(expected, rel=1e-9)
