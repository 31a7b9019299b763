"""The result record of one experiment: what the runner produces and the server stores."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ResultStatus = Literal["ok", "crash", "timeout", "over_budget", "invalid"]

# Error classes, so that agents can learn from failures without parsing logs.
ErrorClass = Literal[
    "syntax_error",  # train.py does not parse or fails at import (other than import_error)
    "import_error",  # importing train.py raised ImportError: a module or name it imports is missing
    "build_model_error",  # exception in build_model
    "train_error",  # exception in train
    "out_of_memory",  # CUDA or host OOM (incl. the sandbox memory limit)
    "out_of_disk",  # wrote past the work folder's cap (work_disk_gb) or one file's size limit
    "nan_loss",  # NaN or exploding loss, failed fast
    "timeout",  # past the hard deadline
    "killed",  # killed by a signal not otherwise explained
    "invalid_output",  # wrong logits shape/dtype, NaN logits
    "non_causal",  # predictions depended on more than the weights and the row's prefix
    "known_text",  # a validation document scored below what any trained model reaches: text it knew
    "batch_variant",  # a row's predictions depended on its batch's size (a CPU's one-row first batch)
    "score_over_budget",  # the model ran longer in the score phase than its bound
    "over_budget",  # trained longer than budget + tolerance
    "sandbox_error",  # the sandbox could not start (infrastructure, not the candidate)
    "score_error",  # exception in the model's forward while scoring
    "cancelled",  # stopped by the caller (e.g. the server cancelled the experiment)
]

# The classes only an attempt to inflate the score ends in (an honest train.py cannot: its
# predictions depend on its weights and the row's prefix alone, and its forward fits the bound):
# the server records each as an integrity event and holds its agent (docs/api.md, "Integrity").
INTEGRITY_CLASSES: frozenset[ErrorClass] = frozenset({"non_causal", "score_over_budget", "known_text"})


class ProgressEvent(BaseModel):
    """A live progress sample, sent at most once a second."""

    step: int
    loss: float | None = None
    tokens_per_s: float | None = None
    fraction: float = Field(0.0, description="fraction of the training budget used, 0..1")
    phase: Literal["startup", "train", "score"] = "train"
    elapsed_s: float = 0.0


class RunConditions(BaseModel):
    """What the machine was like when the run ran, read by the harness (harness.runner.conditions)."""

    speed_gflops: float | None = None  # a fixed piece of work on the run's device, before train.py
    load_1m: float | None = None  # the host's load average at the start
    gpu_sm_clock_mhz: float | None = None
    gpu_temp_c: float | None = None
    gpu_power_w: float | None = None

    def in_words(self) -> str:
        """`speed 41.5 GFLOP/s, load 0.80; GPU 1980 MHz, 64 °C, 350 W`, the readings there are."""
        host = [f"speed {self.speed_gflops:.1f} GFLOP/s"] if self.speed_gflops is not None else []
        host += [f"load {self.load_1m:.2f}"] if self.load_1m is not None else []
        readings = zip(
            (self.gpu_sm_clock_mhz, self.gpu_temp_c, self.gpu_power_w), ("MHz", "°C", "W"), strict=True
        )
        gpu = [f"{value:.0f} {unit}" for value, unit in readings if value is not None]
        return "; ".join(part for part in (", ".join(host), "GPU " + ", ".join(gpu) if gpu else "") if part)


class RunResult(BaseModel):
    """One experiment's measured outcome. Every number here is measured by the harness."""

    status: ResultStatus
    error_class: ErrorClass | None = None
    error_message: str | None = None
    val_bpb: float | None = None
    training_seconds: float | None = None
    startup_seconds: float | None = None  # train process startup not counted as training (<= allowance)
    score_seconds: float | None = (
        None  # the model's time in the score phase: rebuild and forwards, eval and probe
    )
    score_bound_seconds: float | None = (
        None  # the most score_seconds may be (the sum of both processes' bounds)
    )
    total_seconds: float | None = None
    peak_memory_mb: float | None = None
    tokens: int | None = None
    steps: int | None = None
    num_params: int | None = None
    mfu_percent: float | None = None
    device: str = "cpu"
    harness_id: str = ""
    seed: int | None = None  # ctx.seed of the run
    sandbox: bool = True
    conditions: RunConditions | None = None
    log_tail: str = ""
