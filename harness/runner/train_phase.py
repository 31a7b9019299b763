"""The train phase, harness side: start the train sandbox, feed it, watch it, time it, end it."""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.config import HarnessSettings
from harness.runner import compile_cache, preload, timing
from harness.runner.feeder import Feeder, FeedJob
from harness.runner.launch import launch
from harness.runner.limits import Limits, idle_nice, peak_rss_bytes, raise_priority
from harness.runner.messages import DIVERGED_LOSS, LineReader, count, number, text
from harness.runner.output import OutputTail, ProgressPacer
from harness.runner.phases import Phases
from harness.runner.sandbox import (
    Bind,
    SandboxSpec,
    SandboxUnavailableError,
    Scratch,
    python_command,
    visible_path,
)
from protocol.result import ProgressEvent

CANDIDATE_FILE = "train.py"
RSS_SAMPLE_S = 0.25  # peak RSS and OOM kills are polled this often
WEIGHTS_FILE = "model.safetensors"
# A train sandbox that has not started its interpreter and imported torch by then is broken: far
# longer than any cold start measured on a busy machine (docs/benchmarks.md, "Runner overhead").
READY_TIMEOUT_S = 300.0


# A model's own FLOPs per token above this is not believed (a 1e15-parameter model): the MFU figure
# falls back to 6 per parameter.
MAX_FLOPS_PER_TOKEN = 1e15


@dataclass
class TrainOutcome:
    """What the harness observed of one train process. Only times and exit are its own findings;
    fields marked (claimed) come from messages of the sandboxed process."""

    returncode: int | None = None
    lifetime: float = 0.0
    first_step_after: float | None = None  # the first progress message (ctx.log) arrived
    first_data_after: float | None = None  # the feeder got the first request for training data
    deadline_after: float = 0.0  # when the harness would kill it (seconds after `go`)
    allowance: float = 0.0  # the most of its startup credited (the preset's, or less: compile_cache)
    training_seconds: float = 0.0
    # The sandbox's CPU seconds (harness.runner.launch.Launched.cpu_seconds), sampled with the RSS: the
    # latest sample before training began, and the latest of all. On a CPU the score phase's bound
    # follows from their difference (harness.runner.scoring.score_budget).
    cpu_before_training: float = 0.0
    cpu_latest: float = 0.0
    timed_out: bool = False
    cancelled: bool = False
    diverged_loss: float | None = None
    oom_killed: bool = False
    peak_rss_bytes: int = 0
    error: dict[str, str] = field(default_factory=dict)  # (claimed) where, kind, message, traceback
    saved: bool = False  # (claimed) the entry reported the weights saved
    # (claimed) the library modules importing train.py and build_model loaded (harness.runner.preload)
    libraries: list[str] = field(default_factory=list)
    steps: int | None = None  # (claimed) ctx.log calls
    step: int | None = None  # (claimed) the step number last logged, for progress
    tokens: int | None = None  # (claimed)
    flops_per_token: float | None = None  # (claimed) the model's own count, for the MFU figure only
    tokens_served: int = 0  # input tokens of the rows the feeder handed out (trusted)
    cuda_peak_bytes: int | None = None  # (claimed)
    loss: float | None = None  # (claimed) the latest loss, for progress
    tokens_per_s: float | None = None  # (claimed)
    # The first `speed` message, sent by the train entry at `go` before train.py is imported (so
    # trusted): GFLOP/s of a fixed piece of work (harness.runner.conditions).
    speed_gflops: float | None = None
    speed_seen: bool = False
    log: str = ""

    @property
    def training_cpu_seconds(self) -> float:
        """The sandbox's CPU seconds while it trained (0 when it never began), to a sample's step."""
        return self.cpu_latest - self.cpu_before_training if self.started_after is not None else 0.0

    @property
    def started_after(self) -> float | None:
        """The end of startup: the first data request or the first ctx.log, whichever came first."""
        ends = [after for after in (self.first_step_after, self.first_data_after) if after is not None]
        return min(ends, default=None)


@dataclass(frozen=True)
class TrainJob:
    candidate_dir: Path  # gets the harness's own copy of train.py (as CANDIDATE_FILE) before `go`
    work_dir: Path  # empty; sandboxed, only its weights file is visible (train_spec)
    train_dir: Path  # prepared training tokens: read by the feeder, never visible in the sandbox
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
        Bind(job.work_dir / WEIGHTS_FILE, f"/sandbox/work/{WEIGHTS_FILE}", writable=True),
    )
    cached = compile_cache.environment(cache_folder(job))
    if not job.sandboxed:
        return SandboxSpec(binds=binds, cwd=str(job.work_dir), env=cached)
    work = (Scratch("/sandbox/work", work_disk_bytes(job.settings)),)
    cuda = job.device.startswith("cuda")
    return SandboxSpec(binds=binds, scratch=work, cwd="/sandbox/work", cuda=cuda, env=cached)


def cache_folder(job: TrainJob) -> str:
    """Where torch.compile's caches go, as the train entry sees it: in the work tmpfs, sandboxed."""
    work = "/sandbox/work" if job.sandboxed else str(job.work_dir)
    return os.path.join(work, compile_cache.FOLDER)


def work_disk_bytes(settings: HarnessSettings) -> int:
    return int(settings.work_disk_gb * (1 << 30))


class TrainSandbox:
    """A started train sandbox. Its harness entry starts the interpreter and imports torch, says
    `ready`, then waits for `go` before it imports train.py (which need not exist before), so it
    can be started ahead of time, at idle priority, while the previous experiment is scored. Its
    training data comes from a feeder (harness.runner.feeder) that serves from `go` on."""

    def __init__(self, job: TrainJob, idle: bool) -> None:
        self.job = job
        spec = train_spec(job)
        if job.sandboxed:  # the bind's source must exist; the entry overwrites it in place
            (job.work_dir / WEIGHTS_FILE).touch(mode=0o600)
        settings = job.settings
        events_r, events_w = os.pipe()
        log_r, log_w = os.pipe()
        go_r, go_w = os.pipe()
        feed, feed_sandbox = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        candidate_dir = visible_path(spec, job.candidate_dir, job.sandboxed)
        config = {
            "candidate": os.path.join(candidate_dir, CANDIDATE_FILE),
            "weights": visible_path(spec, job.work_dir / WEIGHTS_FILE, job.sandboxed),
            "events_fd": events_w,
            "go_fd": go_r,
            "feed_fd": feed_sandbox.fileno(),
            "cache_dir": cache_folder(job),
            "device": job.device,
            "vocab_size": settings.vocab_size,
            "seq_len": settings.seq_len,
            "time_budget": settings.time_budget,
            "bos_id": job.bos_id,
            "peak_flops": job.peak_flops,
            "limits": asdict(job.limits),
        }
        try:
            self.launched = launch(
                python_command("harness.runner.sandboxed.train_entry", json.dumps(config)),
                spec,
                sandboxed=job.sandboxed,
                limits=job.limits,
                pass_fds=(events_w, go_r, feed_sandbox.fileno()),
                stdout=log_w,
                stderr=log_w,
                nice=idle_nice() if idle else 0,
            )
        except BaseException:
            feed.close()
            raise
        finally:
            for fd in (events_w, log_w, go_r):
                os.close(fd)
            feed_sandbox.close()
        self.feeder = Feeder(
            FeedJob(job.train_dir, settings.seq_len, job.bos_id, settings.train_tokens_max),
            feed,
        )
        self.events_r = events_r
        self.reader = LineReader()
        self.early: list[dict[str, Any]] = []  # messages that came with or before `ready`
        self.ready = False  # `ready` came (and was taken out of `early`)
        self.spawned_at = 0.0  # when `go` was sent
        self.go_w = go_w
        self.fds = [events_r, go_w]
        self.cache_fd: int | None = None  # the sandbox's compile cache folder (harness.runner.compile_cache)
        self.sealed: Path | None = None  # its copy at the first data request, when one was asked for
        self.sealed_after = 0.0  # seconds after `go` the copy was made
        # The run's startup credit, set at `go` (less than the preset's for a run that restored a
        # compile cache: harness.runner.compile_cache.allowance_after)
        self.allowance = settings.compile_allowance
        self.output = OutputTail(log_r)

    def alive(self) -> bool:
        return self.launched.popen.poll() is None

    def go(self, seed: int, cache: compile_cache.CacheUse | None = None) -> float | None:
        """Start the experiment, with `seed` as its ctx.seed, once the sandbox is ready; its clock
        starts now. None if the sandbox died before it was ready (its messages are kept for the
        watch). (The seed comes with `go`, not the config: a sandbox is started before anyone
        knows which run it will serve.) `cache`: the compile cache to restore into the sandbox
        first, or where to seal its own at the first data request (`self.sealed` then)."""
        raise_priority(self.launched.pids())
        if not self.wait_ready():
            return None
        if cache is not None and self.cache_fd is not None:
            self._use_cache(cache, self.cache_fd)
            self.allowance = compile_cache.allowance_after(self.job.settings.compile_allowance, cache)
        self.spawned_at = spawned_at = time.monotonic()
        self.feeder.start(seed)
        go = {"spawned_at": spawned_at, "seed": seed, "allowance": self.allowance}
        try:
            os.write(self.go_w, json.dumps(go).encode() + b"\n")
        except BrokenPipeError:
            return None
        return spawned_at

    def _use_cache(self, cache: compile_cache.CacheUse, folder_fd: int) -> None:
        if cache.restore is not None:
            with contextlib.suppress(OSError):  # a partial restore only means more to compile
                compile_cache.copy_in(cache.restore, folder_fd)
        elif cache.seal_into is not None:
            seal_into = cache.seal_into

            def seal() -> None:
                if compile_cache.copy_out(folder_fd, seal_into):
                    self.sealed = seal_into
                    self.sealed_after = time.monotonic() - self.spawned_at

            self.feeder.on_first_request = seal

    def wait_ready(self) -> bool:
        """Wait until the entry has started, imported torch and, on CUDA, computed on the GPU
        (harness code only, so its `ready` can be believed); False if it exited first."""
        if self.ready:  # waited for before (a worker's preflight), then taken by its first run
            return True
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            for message in self.early:
                if message["ev"] == "ready":
                    self.early.remove(message)
                    self.ready = True
                    self.cache_fd = compile_cache.take_over(self.feeder.sock)
                    if self.cache_fd is not None:
                        self.fds.append(self.cache_fd)
                    return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise SandboxUnavailableError(
                    f"the train sandbox did not start (interpreter and `import torch`) within "
                    f"{READY_TIMEOUT_S:g} s; the machine is overloaded or its Python installation is broken"
                )
            ready, _, _ = select.select([self.events_r], [], [], min(remaining, 1.0))
            if ready:
                data = os.read(self.events_r, 65536)
                if not data:
                    return False
                self.early.extend(self.reader.feed(data))
            elif not self.alive():
                return False

    def why_not_ready(self) -> str:
        """One line on why the sandbox exited before `ready`: the harness's own error, else the
        last line it printed, else its exit status (call after wait_ready returned False)."""
        errors = [m for m in self.early if m["ev"] == "error"]
        if errors:
            return str(errors[-1].get("message", "an error"))
        lines = self.output.text(timeout=1.0).strip().splitlines()
        return lines[-1] if lines else f"exit status {self.launched.popen.poll()}"

    def close(self) -> None:
        """Kill the sandbox, stop its feeder and close its pipes; safe to repeat (a closed fd
        number can be reused by the next sandbox, so it must never be closed twice)."""
        self.launched.close()
        self.feeder.close()
        fds, self.fds = self.fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def run_train_phase(
    sandbox: TrainSandbox,
    spawned_at: float,
    pacer: ProgressPacer,
    cancel: threading.Event,
    started_at: float,
    phases: Phases,
    on_training: Callable[[], None] = lambda: None,
) -> TrainOutcome:
    """Watch a sandbox that was just sent `go` at `spawned_at` until it is done; then end it.
    `on_training` is called once, when the candidate asks for its first batch (the scorer starts)."""
    outcome = TrainOutcome()
    try:
        with phases("train: go to exit (startup, training, weight save)"):
            watch(sandbox, outcome, pacer, cancel, spawned_at, started_at, on_training)
    finally:
        with phases("train: sandbox and feeder close"):
            sandbox.close()
    with phases("train: log"):
        outcome.log = sandbox.output.text()
    outcome.tokens_served = sandbox.feeder.rows_served * sandbox.job.settings.seq_len
    outcome.training_seconds = timing.training_seconds(
        outcome.started_after, outcome.lifetime, outcome.allowance
    )
    return outcome


def watch(
    sandbox: TrainSandbox,
    outcome: TrainOutcome,
    pacer: ProgressPacer,
    cancel: threading.Event,
    spawned_at: float,
    started_at: float,
    on_training: Callable[[], None] = lambda: None,
) -> None:
    """Follow the train process until it exits or must be killed; fill in `outcome`."""
    process, events_r, settings = sandbox.launched, sandbox.events_r, sandbox.job.settings
    outcome.allowance = sandbox.allowance
    pidfd = os.pidfd_open(process.popen.pid)
    next_sample = 0.0
    events_open = True
    for message in sandbox.early:
        handle(message, 0.0, outcome)
    try:
        while True:
            now = time.monotonic()
            if note_first_request(sandbox, outcome, spawned_at):
                on_training()
            credit = timing.startup_credit(outcome.started_after, now - spawned_at, outcome.allowance)
            outcome.deadline_after = timing.train_deadline(
                settings.time_budget, credit, settings.overrun_floor_s
            )
            deadline = spawned_at + outcome.deadline_after
            if now >= next_sample:
                pids = process.pids()  # one listing of the sandbox's processes for both samples
                outcome.peak_rss_bytes = max(outcome.peak_rss_bytes, peak_rss_bytes(pids))
                outcome.cpu_latest = max(outcome.cpu_latest, process.cpu_seconds())
                if outcome.started_after is None:
                    outcome.cpu_before_training = outcome.cpu_latest
                # One process killed at the memory limit is enough: fail fast, not at the deadline.
                outcome.oom_killed = process.oom_killed()
                next_sample = now + RSS_SAMPLE_S
            wait_on = [pidfd, events_r] if events_open else [pidfd]
            ready, _, _ = select.select(wait_on, [], [], min(0.1, max(0.0, deadline - now)))
            received = time.monotonic()
            if events_r in ready:
                data = os.read(events_r, 65536)
                events_open = bool(data)
                for message in sandbox.reader.feed(data):
                    handle(message, received - spawned_at, outcome)
            if pidfd in ready:
                outcome.lifetime = received - spawned_at
                outcome.returncode = process.popen.wait()
                drain(events_r, sandbox.reader, outcome, received - spawned_at)
                note_first_request(sandbox, outcome, spawned_at)
                break
            stop = outcome.diverged_loss is not None or outcome.oom_killed or cancel.is_set()
            if stop or received >= deadline:
                outcome.cancelled = cancel.is_set()
                outcome.timed_out = received >= deadline
                outcome.lifetime = received - spawned_at
                process.kill()
                outcome.returncode = process.popen.returncode
                note_first_request(sandbox, outcome, spawned_at)
                break
            report(outcome, settings, received, spawned_at, started_at, pacer)
    finally:
        os.close(pidfd)
        outcome.oom_killed = process.oom_killed()


def note_first_request(sandbox: TrainSandbox, outcome: TrainOutcome, spawned_at: float) -> bool:
    """Copy the feeder's time of the first data request (its own clock) into the outcome; whether
    this call was the one that found it (training has just begun)."""
    requested_at = sandbox.feeder.first_request_at
    if outcome.first_data_after is None and requested_at is not None:
        outcome.first_data_after = requested_at - spawned_at
        return True
    return False


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
        flops = number(message.get("flops_per_token"), 1.0, MAX_FLOPS_PER_TOKEN)
        outcome.flops_per_token = flops if flops is not None and math.isfinite(flops) else None
    elif event == "libraries":
        room = preload.MAX_NAMES - len(outcome.libraries)
        outcome.libraries.extend(preload.valid_names(message.get("names"))[: max(0, room)])
    elif event == "phase" and message.get("name") == "saved":
        outcome.saved = True
    elif event == "speed" and not outcome.speed_seen:  # later ones are the candidate's
        outcome.speed_seen = True
        gflops = number(message.get("gflops"), 0.0, 1e9)
        outcome.speed_gflops = gflops if gflops is not None and math.isfinite(gflops) else None


def report(
    outcome: TrainOutcome,
    settings: HarnessSettings,
    now: float,
    spawned_at: float,
    started_at: float,
    pacer: ProgressPacer,
) -> None:
    budget = settings.time_budget
    trained = timing.training_seconds(outcome.started_after, now - spawned_at, outcome.allowance)
    pacer.offer(
        ProgressEvent(
            step=outcome.step or 0,
            loss=outcome.loss,
            tokens_per_s=outcome.tokens_per_s,
            fraction=min(1.0, trained / budget) if budget > 0 else 0.0,
            phase="train" if outcome.started_after is not None else "startup",
            elapsed_s=now - started_at,
        )
    )
