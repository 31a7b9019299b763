"""How a worker stops: first SIGTERM/SIGINT finishes the current run, the second stops now.

"Stop now" cancels the running experiment and releases its lease, so it goes back to the queue
at once without counting an attempt. `--stop-now` makes the first signal do that (for
orchestrators with a short grace period). SIGUSR1 always means "finish": it lets an orchestrator
whose SIGTERM is followed by SIGKILL within seconds (Slurm's scancel, a time limit, preemption)
run the worker with `--stop-now` and still ask for a finish ahead of time (Slurm's `--signal`,
a Kubernetes preStop hook). SIGKILL cannot be caught; lease expiry covers it.

Only the worker takes these signals; the processes it starts never see them. Slurm (and systemd)
signal every process of a job, not just the worker: a train sandbox killed by the SIGTERM or
SIGUSR1 meant for its worker was scored as a crash of the candidate on a real Slurm cluster
(tests/deploy/test_slurm.py). So the worker ignores the three signals and blocks them in every
thread, and one thread takes them with sigwait: on Linux a blocked signal is never discarded as
ignored, and what the worker starts inherits the ignored disposition (across exec, and through
the shells and bubblewrap on the way), so its runs end only when the worker ends them (SIGKILL).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGUSR1})


def block_stop_signals() -> None:
    """Ignore and block the stop signals in this thread and all it starts; `StopControl` takes them.

    Call it first thing in the worker's process, before any other thread exists: a thread that
    was running before (numpy starts OpenBLAS threads at import) does not block them, and a
    signal the kernel hands to it is dropped as ignored. `StopControl.install` checks.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def threads_not_blocking(signals: frozenset[signal.Signals]) -> list[str]:
    """The names of this process's threads that do not block all of `signals` (from /proc)."""
    wanted = sum(1 << (signum - 1) for signum in signals)
    found = []
    for task in Path("/proc/self/task").iterdir():
        try:
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines())
        except (OSError, ValueError):  # the thread ended while we looked
            continue
        if int(status["SigBlk"], 16) & wanted != wanted:
            found.append(f"{status['Name'].strip()} ({task.name})")
    return found


class StopControl:
    """Two levels of stopping, set by signals (or directly) and read by the worker loop."""

    def __init__(self, log: logging.Logger, stop_now_on_first: bool = False) -> None:
        self.log = log
        self.stop_now_on_first = stop_now_on_first
        self.finish = threading.Event()  # finish the current experiment, then exit
        self.now = threading.Event()  # cancel the current experiment, release it, exit
        self._lock = threading.Lock()
        self._run_cancel: threading.Event | None = None

    def install(self) -> None:
        """Take the stop signals in a thread of their own (after `block_stop_signals`).

        A signal sent before this call waits, pending, and is taken now.
        """
        unblocked = threads_not_blocking(STOP_SIGNALS)
        if unblocked:
            raise RuntimeError(
                f"threads {', '.join(unblocked)} would drop the stop signals: call "
                "worker.signals.block_stop_signals() before anything starts a thread"
            )

        def take() -> None:
            while True:
                self.handle_signal(signal.sigwait(STOP_SIGNALS))

        threading.Thread(target=take, name="signals", daemon=True).start()

    def handle_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGUSR1:
            if not self.finish.is_set():
                self.log.warning("%s: finishing the current experiment, then exiting", name)
            self.finish.set()
        elif self.finish.is_set() or self.stop_now_on_first:
            self.log.warning("%s: stopping now (cancelling the current run, releasing its lease)", name)
            self.request_stop_now()
        else:
            self.log.warning(
                "%s: finishing the current experiment, then exiting (%s again: stop now)", name, name
            )
            self.finish.set()

    def request_stop_now(self) -> None:
        self.finish.set()
        self.now.set()
        with self._lock:
            if self._run_cancel is not None:
                self._run_cancel.set()

    def watch_run(self, cancel: threading.Event | None) -> None:
        """While a run is going, "stop now" also sets its cancel event (None when it ended)."""
        with self._lock:
            self._run_cancel = cancel
            if cancel is not None and self.now.is_set():
                cancel.set()
