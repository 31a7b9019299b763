"""The score phase, runner side: the trusted scorer, started at the first training batch, told when to go."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.runner.cuda_handover import Handover, RunShm, handover_for
from harness.runner.limits import Limits, descendants, idle_nice, raise_priority, set_session_nice
from harness.runner.messages import MAX_TEXT_CHARS
from harness.runner.output import ProgressPacer
from harness.runner.train_phase import TrainOutcome

# Beyond the scorer's own limit: time for it to notice, clean up and answer.
SCORER_MARGIN_S = 30.0
RESULT_MAX_BYTES = 1 << 20


class ScorerError(RuntimeError):
    """The trusted scorer itself failed (a harness fault, not the candidate's)."""


@dataclass(frozen=True)
class ScoreJob:
    candidate: Path
    weights_dir: Path
    val_dir: Path
    donor_dir: Path  # the training tokens, for the probe's variants
    device: str
    vocab_size: int
    time_budget: float
    seed: int
    bos_id: int
    batch_rows: int
    probe_share: float
    doc_bpb_floor: float  # a document scored below it is known text (harness.evaluate.documents_below)
    sandboxed: bool
    limits: Limits
    timeout: float


class ScorerProcess:
    """One scorer process, started when the candidate begins training (its first batch): its
    startup (and its model sandboxes') then overlaps with training, and a candidate that fails
    before training costs no scorer. It only receives the weights after the train sandbox is gone."""

    def __init__(self, job: ScoreJob) -> None:
        self.job = job
        self.shm: RunShm | None = None
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the scorer process (once; later calls do nothing)."""
        if self.popen is not None:
            return
        job = self.job
        # On CUDA the logits stay on the GPU, which needs the scorer and its models to share a tmpfs
        # as /dev/shm: a folder of this run's, in a mount namespace of the scorer's own.
        on_gpu = handover_for(job.device) is Handover.CUDA_IPC
        self.shm = RunShm.create() if on_gpu and job.sandboxed else None
        config = {
            "val_dir": str(job.val_dir),
            "candidate": str(job.candidate),
            "weights_dir": str(job.weights_dir),
            "device": job.device,
            "vocab_size": job.vocab_size,
            "time_budget": job.time_budget,
            "seed": job.seed,
            "bos_id": job.bos_id,
            "batch_rows": job.batch_rows,
            "donor_dir": str(job.donor_dir),
            "probe_share": job.probe_share,
            "doc_bpb_floor": job.doc_bpb_floor,
            "sandboxed": job.sandboxed,
            "limits": asdict(job.limits),
            "timeout": job.timeout,
            "shared_shm": self.shm is not None,
        }
        command = [
            sys.executable,
            "-I",
            "-B",
            "-u",
            "-m",
            "harness.runner.scoring.scorer",
            json.dumps(config),
        ]
        if self.shm is not None:
            command = self.shm.wrap(command)
        # Idle priority until `go`: on a small CPU machine its startup must not slow training.
        try:
            self.popen = subprocess.Popen(
                ["nice", "-n", str(idle_nice()), *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError:
            if self.shm is not None:
                self.shm.remove()
            raise
        if idle_nice():
            set_session_nice(self.popen.pid, idle_nice())  # its own session: niceness alone is not enough

    def score(self, cancel: threading.Event, pacer: ProgressPacer, trained: TrainOutcome) -> dict[str, Any]:
        """Send `go` with the run's training throughput, from the harness's own counts (the score
        phase's bound follows from it), and wait for the scorer's verdict (a dict with at least
        `status`). Starts the scorer first if training never asked for a batch."""
        self.start()
        assert self.popen is not None and self.popen.stdin is not None
        raise_priority(descendants(self.popen.pid))
        go = json.dumps(
            {
                "train_tokens": trained.tokens_served,
                "training_seconds": trained.training_seconds,
                "training_cpu_seconds": trained.training_cpu_seconds,
                "libraries": trained.libraries,
            }
        )
        with contextlib.suppress(BrokenPipeError):  # a scorer that died early is reported below
            self.popen.stdin.write(go.encode() + b"\n")
            self.popen.stdin.flush()
        deadline = time.monotonic() + self.job.timeout + SCORER_MARGIN_S
        while True:
            try:
                out, err = self.popen.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pacer.flush()
                if cancel.is_set():
                    self.close()
                    return {
                        "status": "crash",
                        "error_class": "cancelled",
                        "error_message": "cancelled while scoring",
                    }
                if time.monotonic() > deadline:
                    self.close()
                    return {
                        "status": "timeout",
                        "error_class": "timeout",
                        "error_message": "scoring timed out",
                    }
        lines = out[-RESULT_MAX_BYTES:].decode(errors="replace").strip().splitlines()
        try:
            result = json.loads(lines[-1])
        except (IndexError, ValueError) as exc:
            stderr = err.decode(errors="replace")[-MAX_TEXT_CHARS:]
            raise ScorerError(f"the scorer failed (exit status {self.popen.returncode}):\n{stderr}") from exc
        return result

    def close(self) -> None:
        """Kill the scorer and its model sandboxes (which would also die with it, but later)."""
        if self.popen is None:
            return
        tree = descendants(self.popen.pid) if self.popen.poll() is None else []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.popen.wait()
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()
        if self.shm is not None:
            self.shm.remove()
