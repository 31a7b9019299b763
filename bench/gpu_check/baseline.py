"""Steps 1 and 4 of the GPU check: the baseline train.py through run_experiment, in the sandbox.

Step 1 reports what the runner measures: status, val_bpb, training tokens per second, MFU (the
runner's, against the device's bf16 peak: 989.5 TFLOP/s for an H200), peak memory, the credited
startup (interpreter, imports, torch.compile, the first step) and the scoring time (the reuse of
the compile by later runs of the same file is step 2's: the baseline's repeats through the
worker). The candidate is the baseline with bench/gpu_check/loader_timer.py appended, which times the
harness loader's next() in every step: that is step 4, the loader's wait per training step on
the GPU, measured in the same run (the runner reports no such figure).

If bubblewrap cannot make a sandbox here (SandboxUnavailableError) or the harness cannot start
inside it (a `sandbox_error` result), the exact reason is recorded and the same candidate runs
without the sandbox; the section's status is then `unsandboxed`, never `ok`.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from bench.gpu_check import loader_timer
from bench.gpu_check.layout import REPO
from bench.gpu_check.results import Results, run_step

RUN, LOADER = "1_sandboxed_baseline", "4_loader_wait"
BASELINE = REPO / "harness" / "baseline" / "train.py"
# Replaces the baseline's train() by one that runs it with the timed ctx.
GLUE = """

_gpu_check_untimed_train = train


def train(model, ctx):
    gpu_check_timed_train(_gpu_check_untimed_train, model, ctx)
"""
# The --cpu dry run: a one-layer version of the baseline's CPU model taking one row of the
# gpu-check length per step, so that a step and the scoring stay short on 2 busy cores.
CPU_SIZING = """

import dataclasses

DEVICE_SETTINGS["cpu"] = dataclasses.replace(
    DEVICE_SETTINGS["cpu"], depth=1, width=64, head_dim=32, device_batch=1, total_batch_tokens={seq_len}
)

_gpu_check_full_train = train


def train(model, ctx):
    # On a busy CPU one step of this model can take longer than the over-budget tolerance (1 s):
    # stop a second early, so that the dry run's runs end inside their budget and count.
    time_left = ctx._time_left
    _gpu_check_full_train(model, dataclasses.replace(ctx, _time_left=lambda: time_left() - 1.0))
"""
# On the CPU there is no compile or CUDA start to leave out, and on busy cores the dry run may
# train for one step only (the check is of the path, not of the CPU's speed): every step counts.
CPU_TIMING = """
GPU_CHECK_WARMUP_STEPS = 0
"""
PROBE_ROWS = 16  # the scorer's causality probe (docs/runner.md)


def candidate_source(device: str, seq_len: int, timed: bool) -> str:
    """The baseline, with the loader timer when `timed`, and sized (and timed from its first step)
    for a CPU on `cpu`."""
    source = BASELINE.read_text()
    if timed:
        source += "\n\n" + Path(loader_timer.__file__).read_text() + GLUE
    if device == "cpu":
        source += CPU_SIZING.format(seq_len=seq_len)
    if timed and device == "cpu":
        source += CPU_TIMING
    return source


def loader_figures(log: str) -> dict[str, Any] | None:
    """The loader timer's figures from a run's log, or None when its line is not there."""
    prefix = loader_timer.GPU_CHECK_LOADER_TAG + " "
    lines = [line for line in log.splitlines() if line.startswith(prefix)]
    return json.loads(lines[-1][len(prefix) :]) if lines else None


def run_figures(result: Any, settings: Any, progress: list[Any]) -> dict[str, Any]:
    trained = result.training_seconds or 0.0
    batches = math.ceil(settings.eval_tokens / settings.seq_len / settings.eval_batch_rows)
    batches += math.ceil(PROBE_ROWS / settings.eval_batch_rows)
    speeds = [round(e.tokens_per_s) for e in progress if e.phase == "train" and e.tokens_per_s]
    return {
        "status_of_run": result.status,
        "error_class": result.error_class,
        "error_message": result.error_message,
        "sandbox": result.sandbox,
        "device": result.device,
        "val_bpb": result.val_bpb,
        "tokens_per_s": round(result.tokens / trained) if result.tokens and trained else None,
        "tokens_per_s_reported_by_train_py": speeds[-60:],
        "mfu_percent": result.mfu_percent,
        "peak_memory_mb": result.peak_memory_mb,
        "training_seconds": result.training_seconds,
        "startup_seconds": result.startup_seconds,
        "score_seconds": result.score_seconds,
        "score_batches": batches,
        "score_seconds_per_batch": round(result.score_seconds / batches, 3) if result.score_seconds else None,
        "total_seconds": result.total_seconds,
        "steps": result.steps,
        "tokens": result.tokens,
        "num_params": result.num_params,
        "harness_id": result.harness_id,
        "containment": result.log_tail.splitlines()[0] if result.log_tail else None,
    }


def body(results: Results, mode: str) -> None:
    from harness.config import load_settings
    from harness.runner import RunRequest, SandboxUnavailableError, run_experiment

    device = "cuda" if mode == "gpu" else "cpu"
    settings = load_settings()
    results.update(
        RUN,
        preset=settings.preset,
        time_budget=settings.time_budget,
        eval_rows=settings.eval_tokens // settings.seq_len,
        eval_batch_rows=settings.eval_batch_rows,
        candidate="harness/baseline/train.py + bench/gpu_check/loader_timer.py"
        + (" + a one-layer CPU model, one row per step" if device == "cpu" else ""),
        headline=("val_bpb", "tokens_per_s", "mfu_percent", "peak_memory_mb", "startup_seconds", "sandbox"),
    )
    progress: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-baseline-") as tmp:
        candidate = Path(tmp) / "train.py"
        candidate.write_text(candidate_source(device, settings.seq_len, timed=True))
        result, failure = None, None
        try:
            result = run_experiment(
                RunRequest(candidate, settings, device=device), on_progress=progress.append
            )
        except SandboxUnavailableError as exc:
            failure = f"SandboxUnavailableError: {exc}"
        if result is not None and result.error_class == "sandbox_error":
            failure = f"sandbox_error: {result.error_message}"
            results.update(RUN, sandboxed_attempt=run_figures(result, settings, progress))
            print(result.log_tail, flush=True)
            result = None
        if result is None:
            print(f"the sandbox failed ({failure}); running without it", flush=True)
            results.update(RUN, sandbox_failure=failure)
            progress.clear()
            unsandboxed = RunRequest(candidate, settings, device=device, sandboxed=False)
            result = run_experiment(unsandboxed, on_progress=progress.append)
    print(result.log_tail, flush=True)
    figures = run_figures(result, settings, progress)
    # A busy CPU may push the dry run's last step past the tolerance: scored all the same, and the
    # dry run checks the path, not the CPU's speed. On the GPU only `ok` passes.
    completed = result.status == "ok" or (device == "cpu" and result.status == "over_budget")
    status = ("ok" if result.sandbox else "unsandboxed") if completed else "failed"
    results.update(RUN, **figures, status=status, error=result.error_message)

    loader = loader_figures(result.log_tail)
    if loader is None:
        results.update(LOADER, status="failed", error="no GPU_CHECK_LOADER line in the run's log")
    else:
        measured = loader.get("measured_steps", 0) > 0
        results.update(
            LOADER,
            **loader,
            source="step 1's run: the baseline's own loop, next() on ctx.loader timed per step",
            status="ok" if measured else "failed",
            error=None if measured else "too few steps to measure after the warm-up steps",
            headline=("wait_ms_median", "wait_ms_max", "step_ms_median", "wait_fraction"),
        )


if __name__ == "__main__":
    run_step((RUN, LOADER), body)
