"""The worker loop: register, claim, run with the harness runner, spool and report; repeat.

It needs only the server URL and a worker token. One worker runs per GPU; several workers on a
host share the prepared data cache and each keep their own state folder (spool, work dirs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from client import ApiError, Client, SchemaError
from harness.config import HarnessSettings
from harness.runner import RunRequest, close_warm_sandbox, run_experiment
from protocol.result import RunResult
from protocol.schemas import ClaimOut
from worker.backoff import Backoff, Stopped, describe, is_transient, retry
from worker.datacache import DataCacheError, ensure_prepared
from worker.delivery import ResultSender
from worker.device import Platform, PlatformError, pin_cpu, pin_gpu, probe_cpu, probe_gpu
from worker.lease import LeaseKeeper
from worker.preflight import PreflightError, preflight
from worker.signals import StopControl
from worker.spool import Spool, new_entry

log = logging.getLogger("autoresearch.worker")

# Long-poll length of one claim: the server answers as soon as an experiment is queued, so this
# only bounds how long a first SIGTERM waits while the worker is idle.
CLAIM_WAIT_S = 5.0
# Experiments in a row whose runs failed in the runner although the worker passed its checks
# again (not candidate failures: those are results) before giving up. Distinct experiments: one
# candidate failing all its attempts here must not stop a healthy worker.
MAX_RUNNER_FAILURES = 3
# Error classes of a result that may be the worker's fault rather than the candidate's: the
# worker checks itself again before the attempt counts (Worker.attribute_failure).
WORKER_FAULT_CLASSES = frozenset({"sandbox_error"})


class WorkerError(Exception):
    """A condition the worker cannot run under; the message says what to change."""


class RunFault(Exception):
    """A run ended in a way that may be the worker's fault (see WORKER_FAULT_CLASSES)."""


class AttributedFailure(Exception):
    """A run failed in the runner; the worker passed its checks again and released the lease."""


@dataclass(frozen=True)
class WorkerOptions:
    server: str
    token: str
    name: str | None = None
    gpu: int | None = None
    cpu: bool = False
    state_dir: Path | None = None
    stop_now: bool = False
    unsafe_no_sandbox: bool = False
    timings: Path | None = None  # append one JSON line per experiment (bench/worker_idle.py)


def default_name(options: WorkerOptions) -> str:
    device = "cpu" if options.cpu else f"gpu{options.gpu if options.gpu is not None else 0}"
    return f"{socket.gethostname()}-{device}"


def select_device(options: WorkerOptions) -> Platform:
    """Pin the worker (and the experiments it starts) to its device and describe it."""
    if options.cpu:
        pin_cpu()
        return probe_cpu()
    if options.gpu is not None:
        pin_gpu(options.gpu)
    return probe_gpu()


def hash_mismatch(claim: ClaimOut) -> str | None:
    """Why the claim's train.py is not the one the server hashed, or None when it is."""
    digest = hashlib.sha256(claim.train_py.encode()).hexdigest()
    if digest == claim.train_py_sha256:
        return None
    return f"train.py has sha256 {digest}, the server said {claim.train_py_sha256}"


@dataclass
class Worker:
    """The state of one running worker; `run` is its main loop."""

    options: WorkerOptions
    settings: HarnessSettings
    name: str
    platform: Platform
    harness_id: str
    client: Client
    spool: Spool
    sender: ResultSender
    stop: StopControl
    work_root: Path
    worker_id: str = ""  # given by the server at registration
    heartbeat_seconds: float = 20.0

    def register(self) -> None:
        url = self.options.server
        try:
            answer = retry(
                lambda: self.client.register(
                    name=self.name,
                    device=self.platform.device,
                    memory_gb=self.platform.memory_gb,
                    harness_id=self.harness_id,
                    preset=self.settings.preset,
                ),
                f"the server at {url} to register",
                self.stop.finish,
                log,
            )
        except ApiError as exc:
            if exc.status in (401, 403):
                raise WorkerError(
                    f"the server refused the worker token ({describe(exc)}); pass a worker token "
                    "with --token or AUTORESEARCH_WORKER_TOKEN"
                ) from exc
            if exc.status == 409:
                raise WorkerError(
                    f"the server refused to register this worker: {describe(exc)} (this worker: harness "
                    f"{self.harness_id}, preset {self.settings.preset}, data {self.settings.data_source}, "
                    f"device {self.platform.device!r})"
                ) from exc
            raise
        if answer.harness_id != self.harness_id:
            raise WorkerError(
                f"the server registered this worker for harness {answer.harness_id}, "
                f"but its data is prepared for {self.harness_id}"
            )
        self.worker_id = answer.worker_id
        self.heartbeat_seconds = answer.heartbeat_seconds
        log.info(
            "registered as worker %s (%s, platform %s, tracks %s, lease %s s, heartbeat %s s)",
            self.worker_id,
            self.name,
            answer.platform,
            ", ".join(answer.tracks) or "-",
            answer.lease_seconds,
            answer.heartbeat_seconds,
        )

    def claim(self) -> ClaimOut | None:
        try:
            return retry(
                lambda: self.client.claim(self.worker_id, wait_s=CLAIM_WAIT_S),
                "the server to hand out work",
                self.stop.finish,
                log,
            )
        except ApiError as exc:
            if exc.status == 409:  # a track it served was archived, and no other accepts it
                raise WorkerError(f"the server gives this worker no more work: {describe(exc)}") from exc
            if exc.status != 404:
                raise
            # The server no longer knows this worker (e.g. a fresh database): register again.
            log.warning(
                "the server does not know worker %s (%s); registering again", self.worker_id, describe(exc)
            )
            self.register()
            return None

    def runner_options(self) -> dict[str, Any]:
        """What every run of this worker shares (and what warm_up prepares a sandbox for)."""
        return {
            "unsafe_no_sandbox": self.options.unsafe_no_sandbox,
            "work_root": self.work_root,
            "device": "cuda" if self.platform.cuda else "cpu",
        }

    def run(self) -> None:
        self.register()  # the preflight left the first experiment's train sandbox started
        idle = False
        failed: set[int] = set()  # experiments whose runs failed in the runner, in a row
        while not self.stop.finish.is_set():
            claim = self.claim()
            if claim is None:
                if not idle:
                    log.info("idle: waiting for queued experiments")
                    idle = True
                continue
            idle = False
            if self.stop.finish.is_set():
                self.release(claim, "worker stopping before the run started")
                break
            try:
                self.run_claimed(claim)
            except WorkerError:
                raise
            except Exception as exc:
                if not isinstance(exc, AttributedFailure):  # not in the run itself (e.g. spooling)
                    log.exception("experiment %s: the worker failed", claim.experiment_id)
                    self.release(claim, f"worker error: {describe(exc)}", count_attempt=True)
                failed.add(claim.experiment_id)
                if len(failed) >= MAX_RUNNER_FAILURES:
                    raise WorkerError(
                        f"the runner failed on {len(failed)} experiments in a row; see the log above"
                    ) from exc
                self.stop.finish.wait(2.0 * len(failed))
            else:
                failed.clear()

    def attribute_failure(self, claim: ClaimOut, reason: str) -> None:
        """A run failed in the runner, the sandbox or the scorer: whose fault was it?

        The worker runs its preflight again. If a check fails, the worker is broken: the
        experiment goes back to the queue with its attempt not counted, and the worker stops
        (WorkerError). If every check passes, the failure is the experiment's and the attempt
        counts, so an experiment that breaks the runner on every worker (or a candidate that fakes
        a harness error) ends after MAX_ATTEMPTS instead of going round the fleet for ever.
        """
        try:
            preflight(self.settings, self.harness_id, **self.runner_options())
        except PreflightError as exc:
            self.release(claim, f"worker fault ({exc}): {reason}", count_attempt=False)
            raise WorkerError(f"this worker cannot run experiments: {exc}") from exc
        self.release(claim, f"worker error: {reason}", count_attempt=True)

    def run_claimed(self, claim: ClaimOut) -> None:
        claimed_at = time.time()
        lease_id, experiment_id = claim.lease_id, claim.experiment_id
        log.info(
            "experiment %s run %s (seed %s, attempt %s): claimed, lease %s",
            experiment_id,
            claim.run,
            claim.seed,
            claim.attempt,
            lease_id,
        )
        mismatch = hash_mismatch(claim)
        if mismatch is not None:
            log.error("experiment %s: %s; not running it", experiment_id, mismatch)
            # Counted: were the server to send a corrupt train.py every time, the experiment ends
            # as an infrastructure failure after MAX_ATTEMPTS instead of going round the fleet.
            self.release(claim, "train.py content hash mismatch", count_attempt=True)
            return
        candidate = self.work_root / "train.py"
        candidate.write_text(claim.train_py)
        keeper = LeaseKeeper(
            self.client,
            lease_id,
            experiment_id,
            self.heartbeat_seconds,
            log,
            progress_interval=claim.progress_seconds,  # scaled to the fleet
        ).start()
        self.stop.watch_run(keeper.cancel)
        started_at = time.time()
        try:
            options = self.runner_options()
            request = RunRequest(
                candidate,
                self.settings,
                seed=claim.seed,
                device=options["device"],
                sandboxed=not options["unsafe_no_sandbox"],
                work_root=options["work_root"],
                # The next run's train sandbox starts while this one is scored (see run()).
                keep_warm=True,
                # A confirmation run or a repeat of the best starts with its train.py's compile.
                compile_cache=self.work_root.with_name("compile-cache"),
            )
            result = run_experiment(request, on_progress=keeper.add_progress, cancel=keeper.cancel)
            if result.error_class in WORKER_FAULT_CLASSES:
                raise RunFault(f"{result.error_class}: {result.error_message}")
        except Exception as exc:
            log.exception("experiment %s: the runner failed", experiment_id)
            try:  # the lease is still heartbeated while the worker checks itself
                self.attribute_failure(claim, describe(exc))
            finally:
                keeper.stop()
            raise AttributedFailure(describe(exc)) from exc
        except BaseException:
            keeper.stop()
            raise
        finally:
            self.stop.watch_run(None)
            keeper.run_finished()
            candidate.unlink(missing_ok=True)
        ended_at = time.time()
        # A cancel that came after the run had finished does not void the finished result.
        if result.error_class == "cancelled":
            keeper.stop()
            if keeper.lost:
                log.warning(
                    "experiment %s: dropped, the lease was lost (%s)", experiment_id, keeper.cancel_reason
                )
            else:
                self.release(claim, keeper.cancel_reason or "worker stopping now")
            return
        entry = new_entry(lease_id, experiment_id, result.model_dump(mode="json"))
        self.spool.put(entry)
        self.sender.submit(entry, keeper)
        log.info(
            "experiment %s: %s, val_bpb %s, %.1f s; result %s spooled",
            experiment_id,
            result.status,
            result.val_bpb,
            ended_at - started_at,
            entry.result_id,
        )
        if self.options.timings is not None:
            self.record_timings(experiment_id, claimed_at, started_at, result)

    def release(self, claim: ClaimOut, reason: str, count_attempt: bool = False) -> None:
        """Give the claimed experiment back to the queue; a few quick tries, then lease expiry covers it."""
        lease_id = claim.lease_id
        backoff = Backoff(base=0.5, cap=2.0)
        for _ in range(3):
            try:
                self.client.release(lease_id, reason, count_attempt)
            except Exception as exc:
                if isinstance(exc, ApiError) and exc.status in (404, 409):
                    log.info("lease %s: already ended on the server (%s)", lease_id, describe(exc))
                    return
                if not is_transient(exc):
                    log.error("lease %s: release refused: %s", lease_id, describe(exc))
                    return
                log.warning("lease %s: release not delivered: %s", lease_id, describe(exc))
                time.sleep(backoff.next_delay())
            else:
                log.info("lease %s released: %s", lease_id, reason)
                return
        log.warning("lease %s: could not release it; it returns to the queue when it expires", lease_id)

    def record_timings(
        self, experiment_id: int, claimed_at: float, started_at: float, result: RunResult
    ) -> None:
        """One JSON line per experiment: when it was claimed, run, spooled, and its measured times."""
        assert self.options.timings is not None
        line = {
            "experiment_id": experiment_id,
            "claimed_at": claimed_at,
            "run_started_at": started_at,
            "spooled_at": time.time(),
            **result.model_dump(mode="json", exclude={"log_tail"}),
        }
        with open(self.options.timings, "a") as f:
            f.write(json.dumps(line) + "\n")


def _why_it_stopped(exc: Exception) -> str:
    """One line for the log: why the worker cannot go on."""
    if isinstance(exc, ApiError):
        return f"the server refused: {describe(exc)}"
    if isinstance(exc, SchemaError):
        return f"the server's answer was not understood (a server of another version?): {exc}"
    return str(exc)


def run_worker(options: WorkerOptions, settings: HarnessSettings) -> int:
    """Run a worker until it is told to stop; 0 on a clean stop, 1 when it cannot work."""
    stop = StopControl(log, stop_now_on_first=options.stop_now)
    stop.install()
    try:
        platform = select_device(options)
    except PlatformError as exc:
        log.error("%s", exc)
        return 1
    name = options.name or default_name(options)
    state_dir = options.state_dir or settings.data_dir / "workers" / name
    state_dir.mkdir(parents=True, exist_ok=True)
    state_lock = FileLock(state_dir / "worker.lock")
    try:
        state_lock.acquire(timeout=0)
    except Timeout:
        log.error("another worker is using %s; give each worker its own --name or --state-dir", state_dir)
        return 1
    try:
        return _run_with_state(options, settings, stop, platform, name, state_dir)
    finally:
        state_lock.release()


def _run_with_state(
    options: WorkerOptions,
    settings: HarnessSettings,
    stop: StopControl,
    platform: Platform,
    name: str,
    state_dir: Path,
) -> int:
    log.info("worker %s on %s (%.1f GB), state in %s", name, platform.device, platform.memory_gb, state_dir)
    if options.unsafe_no_sandbox:
        log.warning("--unsafe-no-sandbox: train.py runs WITHOUT the sandbox, with this worker's rights")
    spool = Spool(state_dir / "spool")
    spool.clean_temporary()
    leftovers = spool.pending()
    if leftovers:
        log.info("resending %d result(s) spooled by an earlier run of this worker", len(leftovers))
    client = Client(options.server, options.token)
    sender = ResultSender(spool, client, log).start()
    code = 0
    try:
        harness_id = ensure_prepared(settings, log)
        work_root = state_dir / "work"
        work_root.mkdir(exist_ok=True)
        worker = Worker(options, settings, name, platform, harness_id, client, spool, sender, stop, work_root)
        preflight(settings, harness_id, **worker.runner_options())
        log.info(
            "preflight passed: data, harness id and a round trip through the sandbox on %s", platform.device
        )
        worker.run()
    except Stopped:
        pass
    except (WorkerError, DataCacheError, PreflightError, ApiError, SchemaError) as exc:
        log.error("%s", _why_it_stopped(exc))
        code = 1
    finally:
        close_warm_sandbox()
    if code == 0 and not stop.now.is_set():
        sender.drain(stop.now)
    sender.close()
    client.close()
    log.info("worker %s %s", name, "stopped" if code == 0 else "cannot work (see above)")
    return code
