"""The train phase, harness side: start the train sandbox, watch it, time it, end it."""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.config import HarnessSettings
from harness.result import ProgressEvent
from harness.runner import timing
from harness.runner.launch import Launched, launch
from harness.runner.limits import Limits, idle_nice, raise_priority
from harness.runner.messages import LineReader, count, number, text
from harness.runner.output import OutputTail, ProgressPacer
from harness.runner.sandbox import Bind, SandboxSpec, Scratch, python_command, visible_path
from harness.runner.train_entry import DIVERGED_LOSS

CANDIDATE_FILE = "train.py"
RSS_SAMPLE_S = 0.25  # peak RSS and OOM kills are polled this often
WEIGHTS_FILE = "model.safetensors"


@dataclass
class TrainOutcome:
    """What the harness observed of one train process. Only times and exit are its own findings;
    fields marked (claimed) come from messages of the sandboxed process."""

    returncode: int | None = None
    lifetime: float = 0.0
    first_step_after: float | None = None
    training_seconds: float = 0.0
    timed_out: bool = False
    cancelled: bool = False
    diverged_loss: float | None = None
    oom_killed: bool = False
    peak_rss_bytes: int = 0
    error: dict[str, str] = field(default_factory=dict)  # (claimed) where, kind, message, traceback
    saved: bool = False  # (claimed) the entry reported the weights saved
    steps: int | None = None  # (claimed) ctx.log calls
    step: int | None = None  # (claimed) the step number last logged, for progress
    tokens: int | None = None  # (claimed)
    cuda_peak_bytes: int | None = None  # (claimed)
    loss: float | None = None  # (claimed) the latest loss, for progress
    tokens_per_s: float | None = None  # (claimed)
    log: str = ""


@dataclass(frozen=True)
class TrainJob:
    candidate_dir: Path  # gets the harness's own copy of train.py (as CANDIDATE_FILE) before `go`
    work_dir: Path  # empty; sandboxed, only its weights file is visible (train_spec)
    train_dir: Path  # prepared training tokens
    settings: HarnessSettings
    bos_id: int
    device: str
    peak_flops: float | None
    sandboxed: bool
    limits: Limits


def train_spec(job: TrainJob) -> SandboxSpec:
    """Sandboxed, the work folder is a tmpfs capped at the preset's `work_disk_gb` (past it a write
    fails: `out_of_disk`), so a candidate cannot fill the host's disk; the one host file it can
    write is the weights file bound inside it (at most RLIMIT_FSIZE). Unsandboxed: a host folder."""
    binds = (
        Bind(job.candidate_dir, "/sandbox/candidate"),
        Bind(job.train_dir, "/sandbox/data/train"),
        Bind(job.work_dir / WEIGHTS_FILE, f"/sandbox/work/{WEIGHTS_FILE}", writable=True),
    )
    work = (Scratch("/sandbox/work", work_disk_bytes(job.settings)),)
    spec = SandboxSpec(binds=binds, scratch=work, cwd="/sandbox/work", cuda=job.device.startswith("cuda"))
    return spec if job.sandboxed else SandboxSpec(binds=binds, cwd=str(job.work_dir))


def work_disk_bytes(settings: HarnessSettings) -> int:
    return int(settings.work_disk_gb * (1 << 30))


class TrainSandbox:
    """A started train sandbox. Its harness entry starts the interpreter and imports torch, then
    waits for `go` before it imports train.py (which need not exist before), so it can be started
    ahead of time, at idle priority, while the previous experiment is scored."""

    def __init__(self, job: TrainJob, idle: bool) -> None:
        self.job = job
        spec = train_spec(job)
        if job.sandboxed:  # the bind's source must exist; the entry overwrites it in place
            (job.work_dir / WEIGHTS_FILE).touch(mode=0o600)
        settings = job.settings
        events_r, events_w = os.pipe()
        log_r, log_w = os.pipe()
        go_r, go_w = os.pipe()
        candidate_dir = visible_path(spec, job.candidate_dir, job.sandboxed)
        config = {
            "candidate": os.path.join(candidate_dir, CANDIDATE_FILE),
            "train_dir": visible_path(spec, job.train_dir, job.sandboxed),
            "weights": visible_path(spec, job.work_dir / WEIGHTS_FILE, job.sandboxed),
            "events_fd": events_w,
            "go_fd": go_r,
            "device": job.device,
            "vocab_size": settings.vocab_size,
            "seq_len": settings.seq_len,
            "time_budget": settings.time_budget,
            "allowance": settings.compile_allowance,
            "seed": settings.seed,
            "bos_id": job.bos_id,
            "peak_flops": job.peak_flops,
            "train_tokens_max": settings.train_tokens_max,
            "limits": asdict(job.limits),
        }
        try:
            self.launched = launch(
                python_command("harness.runner.train_entry", json.dumps(config)),
                spec,
                sandboxed=job.sandboxed,
                limits=job.limits,
                pass_fds=(events_w, go_r),
                stdout=log_w,
                stderr=log_w,
                nice=idle_nice() if idle else 0,
            )
        finally:
            for fd in (events_w, log_w, go_r):
                os.close(fd)
        self.events_r = events_r
        self.go_w = go_w
        self.fds = [events_r, go_w]
        self.output = OutputTail(log_r)

    def alive(self) -> bool:
        return self.launched.popen.poll() is None

    def go(self) -> float | None:
        """Start the experiment; its clock starts now. None if the sandbox had already died."""
        raise_priority(self.launched.pids())
        spawned_at = time.monotonic()
        try:
            os.write(self.go_w, json.dumps({"spawned_at": spawned_at}).encode() + b"\n")
        except BrokenPipeError:
            return None
        return spawned_at

    def close(self) -> None:
        """Kill the sandbox and close its pipes; safe to repeat (a closed fd number can be reused
        by the next sandbox, so it must never be closed twice)."""
        self.launched.close()
        fds, self.fds = self.fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def run_train_phase(
    sandbox: TrainSandbox, spawned_at: float, pacer: ProgressPacer, cancel: threading.Event, started_at: float
) -> TrainOutcome:
    """Watch a sandbox that was just sent `go` at `spawned_at` until it is done; then end it."""
    outcome = TrainOutcome()
    try:
        watch(sandbox.launched, sandbox.events_r, sandbox.job, outcome, pacer, cancel, spawned_at, started_at)
    finally:
        sandbox.close()
    outcome.log = sandbox.output.text()
    outcome.training_seconds = timing.training_seconds(
        outcome.first_step_after, outcome.lifetime, sandbox.job.settings.compile_allowance
    )
    return outcome


def watch(
    process: Launched,
    events_r: int,
    job: TrainJob,
    outcome: TrainOutcome,
    pacer: ProgressPacer,
    cancel: threading.Event,
    spawned_at: float,
    started_at: float,
) -> None:
    """Follow the train process until it exits or must be killed; fill in `outcome`."""
    settings = job.settings
    deadline = spawned_at + timing.train_deadline(settings.time_budget, settings.compile_allowance)
    pidfd = os.pidfd_open(process.popen.pid)
    reader = LineReader()
    next_sample = 0.0
    events_open = True
    try:
        while True:
            now = time.monotonic()
            if now >= next_sample:
                outcome.peak_rss_bytes = max(outcome.peak_rss_bytes, process.peak_rss_bytes())
                # One process killed at the memory limit is enough: fail fast, not at the deadline.
                outcome.oom_killed = process.oom_killed()
                next_sample = now + RSS_SAMPLE_S
            wait_on = [pidfd, events_r] if events_open else [pidfd]
            ready, _, _ = select.select(wait_on, [], [], min(0.1, max(0.0, deadline - now)))
            received = time.monotonic()
            if events_r in ready:
                data = os.read(events_r, 65536)
                events_open = bool(data)
                for message in reader.feed(data):
                    handle(message, received - spawned_at, outcome)
            if pidfd in ready:
                outcome.lifetime = received - spawned_at
                outcome.returncode = process.popen.wait()
                drain(events_r, reader, outcome, received - spawned_at)
                break
            stop = outcome.diverged_loss is not None or outcome.oom_killed or cancel.is_set()
            if stop or received >= deadline:
                outcome.cancelled = cancel.is_set()
                outcome.timed_out = received >= deadline
                outcome.lifetime = received - spawned_at
                process.kill()
                outcome.returncode = process.popen.returncode
                break
            report(outcome, job, received, spawned_at, started_at, pacer)
    finally:
        os.close(pidfd)
        outcome.oom_killed = process.oom_killed()


def drain(events_r: int, reader: LineReader, outcome: TrainOutcome, at: float) -> None:
    """Read the messages still in the pipe once the process has exited (nothing can add more)."""
    os.set_blocking(events_r, False)
    try:
        while data := os.read(events_r, 65536):
            for message in reader.feed(data):
                handle(message, at, outcome)
    except (BlockingIOError, OSError):
        pass


def handle(message: dict[str, Any], after: float, outcome: TrainOutcome) -> None:
    """Apply one (untrusted) message received `after` seconds after spawn."""
    event = message["ev"]
    if event == "progress":
        if outcome.first_step_after is None:
            outcome.first_step_after = after
        step, steps, tokens = (
            count(message.get("step")),
            count(message.get("steps")),
            count(message.get("tokens")),
        )
        outcome.step = step if step is not None else outcome.step
        outcome.steps = steps if steps is not None else outcome.steps
        outcome.tokens = tokens if tokens is not None else outcome.tokens
        loss, speed = number(message.get("loss")), number(message.get("tokens_per_s"), 0.0)
        if loss is not None and (math.isnan(loss) or math.isinf(loss) or loss > DIVERGED_LOSS):
            outcome.diverged_loss = loss
        outcome.loss = loss if loss is not None and math.isfinite(loss) else None
        outcome.tokens_per_s = speed if speed is not None and math.isfinite(speed) else None
    elif event == "error" and not outcome.error:
        outcome.error = {key: text(message.get(key)) for key in ("where", "kind", "message", "traceback")}
    elif event == "stats":
        outcome.steps = count(message.get("steps"))
        outcome.tokens = count(message.get("tokens"))
        outcome.cuda_peak_bytes = count(message.get("cuda_peak_bytes"))
    elif event == "phase" and message.get("name") == "saved":
        outcome.saved = True


def report(
    outcome: TrainOutcome,
    job: TrainJob,
    now: float,
    spawned_at: float,
    started_at: float,
    pacer: ProgressPacer,
) -> None:
    budget = job.settings.time_budget
    trained = timing.training_seconds(
        outcome.first_step_after, now - spawned_at, job.settings.compile_allowance
    )
    pacer.offer(
        ProgressEvent(
            step=outcome.step or 0,
            loss=outcome.loss,
            tokens_per_s=outcome.tokens_per_s,
            fraction=min(1.0, trained / budget) if budget > 0 else 0.0,
            phase="train" if outcome.first_step_after is not None else "startup",
            elapsed_s=now - started_at,
        )
    )
