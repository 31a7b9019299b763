"""The scorer's handle on one model sandbox: start it, command it, time it, read its logits, end it.

Both model processes are made alike (same fds, memfd names, buffer sizes and commands), so the
eval and the probe differ to the model only in which rows they are shown and when.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import mmap
import os
import select
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.runner.cuda_handover import ExportError, Handover, OpenError, open_export
from harness.runner.launch import Launched, launch
from harness.runner.limits import Limits
from harness.runner.messages import LineReader, text
from harness.runner.output import OutputTail
from harness.runner.sandbox import Bind, SandboxSpec, python_command, visible_path
from harness.runner.train_phase import WEIGHTS_FILE

if TYPE_CHECKING:  # the scorer's process has torch; a worker that only starts sandboxes need not
    import torch


class ModelFailure(Exception):
    """The model process failed; carries the result status and error class it earns."""

    def __init__(self, status: str, error_class: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_class = error_class


@dataclass(frozen=True)
class ModelJob:
    candidate: Path
    weights_dir: Path  # holds model.safetensors once training is done; empty before
    device: str
    vocab_size: int
    seq_len: int
    time_budget: float
    seed: int
    bos_id: int
    max_rows: int
    sandboxed: bool
    limits: Limits
    handover: Handover  # how logits reach the scorer (harness.runner.cuda_handover)
    shared_shm: bool = False  # bind the scorer's /dev/shm (the run's folder) as the sandbox's


# The scorer's /dev/shm: on CUDA the run's folder (harness.runner.cuda_handover.RunShm).
SCORER_SHM = Path("/dev/shm")

# How often a wait on the model calls its `check` (the scorer's CPU-seconds bound): a model past
# its bound runs at most this much longer.
CHECK_EVERY_S = 0.1

# Where the model entry's error reports land: (status, error class).
ERROR_CLASSES = {
    "import": ("crash", "syntax_error"),
    "build_model": ("crash", "build_model_error"),
    "load_weights": ("invalid", "invalid_output"),
    "forward": ("crash", "score_error"),
    "harness": ("crash", "sandbox_error"),
}


def model_spec(job: ModelJob) -> SandboxSpec:
    """What a model sandbox sees: the candidate, the weights folder and, for CUDA IPC, the
    scorer's /dev/shm (the run's folder) as its own."""
    binds: tuple[Bind, ...] = (
        Bind(job.candidate, "/sandbox/candidate/train.py"),
        Bind(job.weights_dir, "/sandbox/weights"),
    )
    if job.shared_shm:
        binds += (Bind(SCORER_SHM, "/dev/shm", writable=True),)
    if not job.sandboxed:
        return SandboxSpec(binds=binds, cwd=str(job.weights_dir))
    return SandboxSpec(binds=binds, cwd="/tmp", cuda=job.device.startswith("cuda"))


class ModelProcess:
    def __init__(self, job: ModelJob, label: str) -> None:
        self.label = label
        self.job = job
        self.inputs_fd = os.memfd_create("inputs")  # the name is visible inside: it must not say which
        os.ftruncate(self.inputs_fd, job.max_rows * job.seq_len * 8)
        self.inputs = np.frombuffer(
            mmap.mmap(self.inputs_fd, job.max_rows * job.seq_len * 8), dtype=np.int64
        ).reshape(job.max_rows, job.seq_len)
        self.shape = (job.max_rows, job.seq_len, job.vocab_size)  # of the logits buffer
        # The host hand-over's shared file, or (CUDA IPC) the model's GPU buffer, opened on `loaded`.
        self.logits_fd: int | None = None
        self.logits: np.ndarray | torch.Tensor | None = None
        if job.handover is Handover.HOST:
            size = math.prod(self.shape) * 4
            self.logits_fd = os.memfd_create("logits")
            os.ftruncate(self.logits_fd, size)
            self.logits = np.frombuffer(mmap.mmap(self.logits_fd, size), dtype=np.float32).reshape(self.shape)
        events_r, events_w = os.pipe()
        commands_r, commands_w = os.pipe()
        log_r, log_w = os.pipe()
        spec = model_spec(job)
        config = {
            "candidate": visible_path(spec, job.candidate, job.sandboxed),
            "weights": os.path.join(visible_path(spec, job.weights_dir, job.sandboxed), WEIGHTS_FILE),
            "events_fd": events_w,
            "commands_fd": commands_r,
            "inputs_fd": self.inputs_fd,
            "logits_fd": self.logits_fd,
            "handover": job.handover.value,
            "device": job.device,
            "vocab_size": job.vocab_size,
            "seq_len": job.seq_len,
            "time_budget": job.time_budget,
            "seed": job.seed,
            "bos_id": job.bos_id,
            "max_rows": job.max_rows,
            "limits": asdict(job.limits),
        }
        own = [self.inputs_fd] if self.logits_fd is None else [self.inputs_fd, self.logits_fd]
        fds = (events_w, commands_r, *own)
        try:
            self.launched: Launched = launch(
                python_command("harness.runner.sandboxed.model_entry", json.dumps(config)),
                spec,
                sandboxed=job.sandboxed,
                limits=job.limits,
                pass_fds=fds,
                stdout=log_w,
                stderr=log_w,
            )
        finally:
            for fd in (events_w, commands_r, log_w):
                os.close(fd)
        self.events_r = events_r
        self.commands_w = commands_w
        self.pidfd = os.pidfd_open(self.launched.popen.pid)
        self.fds = [events_r, commands_w, self.pidfd, *own]
        self.reader = LineReader()
        self.output = OutputTail(log_r)
        self.pending: list[dict[str, Any]] = []
        self.batches = 0
        self.submitted = (0, 0.0)  # rows and time of the latest batch command

    @functools.cached_property
    def pids(self) -> list[int]:
        """The sandbox's processes, looked up once (after `ready`), for CPU accounting."""
        return self.launched.pids()

    def send(self, **command: Any) -> None:
        try:
            os.write(self.commands_w, (json.dumps(command) + "\n").encode())
        except OSError as exc:  # the process has gone; the next wait reports why
            raise self.failure("the model process exited unexpectedly") from exc

    def wait_for(
        self,
        event: str,
        deadline: float,
        late: ModelFailure,
        batch: int | None = None,
        check: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Block until the model sends `event` (for `batch`, if given), and return that message;
        raise ModelFailure on an error report, the process's death, or `late` at the deadline.
        Stale or forged answers are skipped. `check`, if given, is called every CHECK_EVERY_S
        while waiting and may raise (the scorer's CPU-seconds bound)."""
        while True:
            if check is not None:
                check()
            while self.pending:
                message = self.pending.pop(0)
                if message["ev"] == "error":
                    status, error_class = ERROR_CLASSES.get(
                        text(message.get("where")), ("crash", "score_error")
                    )
                    kind = text(message.get("kind"))
                    if kind == "oom":
                        status, error_class = "crash", "out_of_memory"
                    elif kind == "invalid_output":
                        status, error_class = "invalid", "invalid_output"
                    detail = text(message.get("traceback")) or text(message.get("message"))
                    raise ModelFailure(status, error_class, f"score phase ({self.label}): {detail}")
                if message["ev"] == event and (batch is None or message.get("batch") == batch):
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise late
            wait = remaining if check is None else min(remaining, CHECK_EVERY_S)
            ready, _, _ = select.select([self.events_r, self.pidfd], [], [], wait)
            if self.events_r in ready:
                data = os.read(self.events_r, 65536)
                self.pending.extend(self.reader.feed(data))
                if data:
                    continue
            if (self.pidfd in ready or self.events_r in ready) and not self.pending:
                raise self.failure("the model process exited without answering")

    def failure(self, what: str) -> ModelFailure:
        self.launched.popen.wait(timeout=5)
        code = self.launched.popen.returncode
        if self.launched.oom_killed():
            return ModelFailure("crash", "out_of_memory", f"score phase ({self.label}): out of memory")
        return ModelFailure("crash", "killed", f"score phase ({self.label}): {what} (exit status {code})")

    def start(self, deadline: float, late: ModelFailure, check: Callable[[], None] | None = None) -> float:
        """Send `go` (import train.py, build_model, load the weights) and wait until the model is
        loaded; the seconds that took. Call once the process is `ready` (wait_for)."""
        started = time.monotonic()
        self.send(cmd="go")
        loaded = self.wait_for("loaded", deadline, late, check=check)
        if self.job.handover is Handover.CUDA_IPC:
            self.logits = self.open_shared(loaded.get("handover"))
        return time.monotonic() - started

    def open_shared(self, message: object) -> torch.Tensor:
        """The model's exported GPU buffer, opened here (harness.runner.cuda_handover)."""
        try:
            return open_export(message, self.job.device, self.shape)
        except ExportError as exc:
            raise ModelFailure("invalid", "invalid_output", f"score phase ({self.label}): {exc}") from exc
        except OpenError as exc:
            raise ModelFailure("crash", "sandbox_error", f"score phase ({self.label}): {exc}") from exc

    def submit(self, rows: np.ndarray) -> None:
        """Command a forward pass over `rows` [n, T]; `receive` waits for its logits. The model may
        still write to the logits buffer, so call this only once the last batch's logits are
        copied out."""
        self.inputs[: rows.shape[0]] = rows
        self.batches += 1
        self.submitted = (rows.shape[0], time.monotonic())
        self.send(cmd="batch", rows=rows.shape[0], batch=self.batches)

    def receive(
        self, deadline: float, late: ModelFailure, check: Callable[[], None] | None = None
    ) -> tuple[np.ndarray | torch.Tensor, float]:
        """The logits [n, T, V] of the batch submitted last, as a view of the shared buffer (host
        memory, or the model's GPU buffer: the model process can still write to it, so copy before
        use), and the seconds from command to answer."""
        count, started = self.submitted
        self.wait_for("done", deadline, late, self.batches, check)
        assert self.logits is not None  # opened by `start`
        return self.logits[:count], time.monotonic() - started

    def log(self) -> str:
        return self.output.text(timeout=1.0)

    def close(self) -> None:
        """Kill the sandbox and close its fds; safe to repeat (never closes an fd number twice)."""
        self.launched.close()
        self.logits = None  # the model is gone: now its GPU buffer can be let go (no counter race)
        fds, self.fds = self.fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
