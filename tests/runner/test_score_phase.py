"""Hostile candidates that go after the score phase, where their model is candidate code too:
training while scored, and reading ahead or learning from the validation rows while keeping every
prediction within the tolerance. Each ends invalid; the honest candidates of test_run_ok.py never do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.runner.scoring import score_budget
from harness.runner.scoring.agreement import LEAN_FRACTION, TOLERANCE_NATS
from protocol.result import INTEGRITY_CLASSES
from tests.runner.candidates import compose

pytestmark = pytest.mark.heavy

CARRIED = "hostile/carried_rows.py"
# Far more training than any bound of the test preset allows, on any machine: one step of the
# carried bigram takes about a millisecond, the bound is a few seconds.
MANY_STEPS = 1_000_000
# Each clipped candidate moves a log-probability by at most 2 x CLIP after the scorer's
# renormalisation, so two processes' answers stay within 4 x CLIP < the tolerance at every position.
CLIP = 0.24 * TOLERANCE_NATS["cpu"]


@pytest.mark.parametrize("part", ["hostile/trains_in_load.py", "hostile/trains_in_first_forward.py"])
def test_training_while_scored_is_stopped_at_the_bound(run_candidate, tmp_path: Path, part: str) -> None:
    """Deterministic training (a fresh process doing the same agrees): the time bound stops it."""
    result = run_candidate(compose(tmp_path, CARRIED, part, steps=MANY_STEPS), time_budget=1.0)
    assert (result.status, result.error_class) == ("invalid", "score_over_budget"), result.log_tail
    assert "score phase (eval): the model was still running at" in result.error_message
    assert "no training" in result.error_message
    assert result.val_bpb is None
    assert result.score_seconds is not None and result.score_bound_seconds is not None
    assert "CANDIDATE load_state_dict CALLED" not in result.log_tail  # the harness loads with torch's own


def test_hidden_training_within_the_flat_startup_allowance_is_stopped_on_a_cpu(
    run_candidate, tmp_path: Path
) -> None:
    """2.5 CPU seconds of training before the first answer, the same in both processes (the step
    count measured in training, carried in the weights): within what CUDA's flat startup allowance
    would grant, but many times what a CPU grants this run (STARTUP_TOKENS of its own training)."""
    seconds = 2.5
    assert 2 * score_budget.CPU_STARTUP_MIN_S < seconds < score_budget.STARTUP_MIN_S
    train_py = compose(tmp_path, CARRIED, "hostile/trains_for_cpu_seconds.py", seconds=seconds)
    result = run_candidate(train_py, time_budget=1.0)
    assert (result.status, result.error_class) == ("invalid", "score_over_budget"), result.log_tail
    assert "score phase (eval): the model was still running at" in result.error_message
    assert result.val_bpb is None


def test_a_forward_that_depends_on_the_batch_size_is_batch_variant_not_an_integrity_event(
    run_candidate, tmp_path: Path
) -> None:
    """On a CPU each process's first batch is one row, compared later with full batches: a model
    whose row alone rounds differently (bf16 kernels there can) is not scored, and told why, but
    is no integrity event; every comparison between like batches agreed."""
    result = run_candidate(compose(tmp_path, "broken/batch_variant.py"), time_budget=1.0)
    assert (result.status, result.error_class) == ("invalid", "batch_variant"), result.log_tail
    assert "batch of one row and in a full batch" in result.error_message
    assert "float32" in result.error_message
    assert result.error_class not in INTEGRITY_CLASSES
    assert result.val_bpb is None
    assert re.search(r"repeat \d+ positions, max 0,", result.log_tail), result.log_tail


@pytest.mark.parametrize(
    ("part", "args"),
    [("hostile/trains_in_forward_hook.py", {"steps": 20}), ("hostile/trains_in_thread.py", {})],
)
def test_training_a_little_with_every_batch_is_non_causal(
    run_candidate, tmp_path: Path, part: str, args
) -> None:
    """Training that fits in the bound changes the model between batches: rows scored twice, or
    by a fresh process, disagree."""
    result = run_candidate(compose(tmp_path, CARRIED, part, **args), time_budget=1.0)
    assert result.status == "invalid", result.log_tail
    assert result.error_class in ("non_causal", "score_over_budget"), result.log_tail
    assert result.val_bpb is None


CLIPPED = [
    ("hostile/lookahead_mix.py", {"share": 0.01}),
    ("hostile/lookahead_mix.py", {"share": 0.001}),
    ("hostile/lookahead_mix.py", {"share": 0.0001}),
    ("hostile/ngram_cache.py", {"share": 0.1}),
    ("hostile/online_head.py", {"lr": 1.0}),
    ("hostile/online_bias.py", {"lr": 1.0}),
    ("hostile/online_lora.py", {"lr": 1.0}),
]


@pytest.mark.parametrize(("part", "args"), CLIPPED, ids=[f"{p.split('/')[1][:-3]}-{a}" for p, a in CLIPPED])
def test_leaks_and_learners_clipped_under_the_tolerance_are_non_causal(
    run_candidate, tmp_path: Path, part: str, args
) -> None:
    result = run_candidate(
        compose(tmp_path, "hostile/clipped_mix.py", part, clip_nats=CLIP, **args), time_budget=1.0
    )
    assert (result.status, result.error_class) == ("invalid", "non_causal"), result.log_tail
    # No single position gave it away: the lean over many did.
    assert "every position is within the tolerance" in result.error_message, result.error_message
    assert f"limit {LEAN_FRACTION * TOLERANCE_NATS['cpu']:.3g}" in result.error_message
    assert result.val_bpb is None


PROCESS_STARTS = ("fork", "subprocess", "posix_spawn", "multiprocessing", "clone", "clone3")


def test_a_model_starts_no_process_while_scored(run_candidate, tmp_path: Path) -> None:
    """Work hidden in children the kernel reaps at once (SIGCHLD ignored, a subreaper) leaves no
    trace in any reading of live processes: a score sandbox can start no process, by any system
    call, while its threads work (the model's own forward, torch's threads)."""
    train_py = compose(tmp_path, CARRIED, "hostile/trains_in_reaped_children.py")
    result = run_candidate(train_py, time_budget=1.0)
    assert result.status == "ok", result.log_tail
    for way in PROCESS_STARTS:  # in the eval process and again in the probe
        assert result.log_tail.count(f"REFUSED {way}:") == 2, (way, result.log_tail)
    assert "STARTED" not in result.log_tail and "CHILD TRAINED" not in result.log_tail
    assert result.log_tail.count("NO CHAIN") == 2
