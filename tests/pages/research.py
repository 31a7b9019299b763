"""Creating experiments in the page tests through the real HTTP API, as an agent and a worker.

`Research` submits changes of train.py with an agent token and plays the worker side of the
protocol (register, claim, heartbeat, progress, result) with a worker token, through the
project's own Python SDK. It is a real client of a real server: every experiment the pages show
was queued, leased, run and decided by the server. The one thing not real is the training
itself (there is no GPU here, and the pages do not care how a number was measured): the
results it reports carry val_bpb values the test chooses.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from client.api import Client
from protocol.schemas import ResultOutcome
from tests.pages.live_server import HARNESS_ID, PLATFORM, LiveServer

_MATRIX_LR = re.compile(r"^MATRIX_LR = .*$", re.MULTILINE)


@dataclass
class Lease:
    lease_id: str
    experiment_id: int
    attempt: int


@dataclass
class Research:
    server: LiveServer
    worker_name: str = "gpu-0"
    _agents: dict[str, Client] = field(default_factory=dict)
    _worker: Client | None = None
    _worker_id: str | None = None
    _counter: int = 0

    def agent(self, name: str) -> Client:
        if name not in self._agents:
            self._agents[name] = Client(self.server.url, self.server.agent_tokens[name])
        return self._agents[name]

    @property
    def worker(self) -> Client:
        return self._registered()[0]

    def _registered(self) -> tuple[Client, str]:
        """The worker client, registered with the server on first use, and its worker id."""
        if self._worker is None or self._worker_id is None:
            self._worker = Client(self.server.url, self.server.worker_token)
            registered = self._worker.register(
                name=self.worker_name, device=PLATFORM, memory_gb=80.0, harness_id=HARNESS_ID
            )
            self._worker_id = str(registered.worker_id)
        return self._worker, self._worker_id

    def submit(self, description: str, agent: str = "alice", hypothesis: str | None = None) -> int:
        """Queue a real change of the best train.py (a new matrix learning rate) and return its id."""
        self._counter += 1
        best = self.agent(agent).best().train_py
        changed = _MATRIX_LR.sub(f"MATRIX_LR = {0.01 + self._counter / 1000:.3f}  # {description}", best, 1)
        assert changed != best, "the baseline train.py has no MATRIX_LR line to change"
        created = self.agent(agent).submit(description, train_py=changed, hypothesis=hypothesis)
        return int(created.id)

    def claim(self) -> Lease:
        worker, worker_id = self._registered()
        claimed = worker.claim(worker_id, wait_s=5.0)
        assert claimed is not None, "nothing was queued to claim"
        return Lease(claimed.lease_id, claimed.experiment_id, claimed.attempt)

    def progress(self, lease: Lease, fraction: float, step: int, loss: float) -> None:
        event = dict(step=step, loss=loss, fraction=fraction, phase="train", elapsed_s=300 * fraction)
        self.worker.send_progress(lease.lease_id, [{**event, "tokens_per_s": 250_000.0}])

    def report(
        self,
        lease: Lease,
        val_bpb: float | None,
        log: str = "",
        failure: tuple[str, str, str] = ("crash", "train_error", "RuntimeError: loss is NaN at step 12"),
    ) -> ResultOutcome:
        """Send the run's result: ok with `val_bpb`, or, when it is None, `failure` (status, error
        class, message)."""
        status, error_class, message = ("ok", None, None) if val_bpb is not None else failure
        result: dict[str, Any] = {
            "status": status,
            "val_bpb": val_bpb,
            "error_class": error_class,
            "error_message": message,
            "training_seconds": 300.0,
            "total_seconds": 330.0,
            "peak_memory_mb": 44_000.0,
            "tokens": 500_000_000,
            "steps": 950,
            "num_params": 50_300_000,
            "mfu_percent": 39.5,
            "device": PLATFORM,
            "harness_id": HARNESS_ID,
            "sandbox": True,
            "log_tail": log or f"step 950 | loss 3.21\nval_bpb {val_bpb}\n",
        }
        return self.worker.result(lease.lease_id, str(uuid.uuid4()), result)

    def run_next(self, val_bpb: float | None) -> ResultOutcome:
        """Claim the next queued experiment and report its result; the server's decision comes back."""
        lease = self.claim()
        self.progress(lease, 0.5, 400, 3.6)
        return self.report(lease, val_bpb)

    def close(self) -> None:
        for client in [*self._agents.values(), *([self._worker] if self._worker else [])]:
            client.close()
