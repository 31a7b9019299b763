"""SIGTERM handling in a real process: first finishes the run, second (or --stop-now) cancels it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from harness.runner.limits import descendants

SCRIPT = """
import logging, sys, threading
from worker.signals import StopControl, block_stop_signals
block_stop_signals()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
stop = StopControl(logging.getLogger("w"), stop_now_on_first=sys.argv[1] == "now")
stop.install()
run_cancel = threading.Event()
stop.watch_run(run_cancel)
print("ready", flush=True)
stop.finish.wait()
print("finish", stop.now.is_set(), run_cancel.is_set(), flush=True)
stop.now.wait()
print("now", run_cancel.is_set(), flush=True)
"""


def start(mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def read_until(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"process ended before printing {prefix!r}")


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_finishes_second_stops_now(first: signal.Signals) -> None:
    proc = start("finish")
    proc.send_signal(first)
    assert read_until(proc, "finish") == "finish False False"  # the run goes on
    proc.send_signal(signal.SIGTERM)
    assert read_until(proc, "now") == "now True"  # the run is cancelled
    assert proc.wait(timeout=10) == 0


def test_stop_now_flag_cancels_on_first_signal() -> None:
    proc = start("now")
    proc.send_signal(signal.SIGTERM)
    assert read_until(proc, "finish") == "finish True True"
    assert proc.wait(timeout=10) == 0


def test_usr1_finishes_even_with_stop_now_and_a_later_sigterm_stops_now() -> None:
    proc = start("now")
    proc.send_signal(signal.SIGUSR1)
    assert read_until(proc, "finish") == "finish False False"  # the run goes on
    proc.send_signal(signal.SIGUSR1)  # Slurm may send it again: still only "finish"
    proc.send_signal(signal.SIGTERM)
    assert read_until(proc, "now") == "now True"
    assert proc.wait(timeout=10) == 0


CHILD = """
import subprocess, sys, time
from worker.signals import StopControl, block_stop_signals
import logging
block_stop_signals()
stop = StopControl(logging.getLogger("w"))
stop.install()
# A shell that stays (it resets its signal mask), as a sandbox or train.py may start one.
child = subprocess.Popen(["/bin/sh", "-c", "sleep 60; exit 0"])
print(child.pid, flush=True)
stop.finish.wait()
print("finish", child.poll(), flush=True)
child.kill()
"""


def test_processes_the_worker_starts_ignore_the_stop_signals_it_takes() -> None:
    """As under Slurm, which signals every process of the job: only the worker reacts."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        os.kill(child, sig)
    os.kill(proc.pid, signal.SIGUSR1)
    assert proc.stdout.readline().strip() == "finish None"  # the worker finished; the child lives on
    assert proc.wait(timeout=10) == 0


LATE_BLOCK = """
import logging, threading
from worker.signals import StopControl, block_stop_signals
started = threading.Event()
threading.Thread(target=started.wait, daemon=True).start()
block_stop_signals()
try:
    StopControl(logging.getLogger("w")).install()
except RuntimeError as exc:
    print(exc)
started.set()
"""


def test_install_refuses_when_a_thread_would_drop_the_signals() -> None:
    out = subprocess.run([sys.executable, "-c", LATE_BLOCK], capture_output=True, text=True, timeout=30)
    assert "would drop the stop signals" in out.stdout  # names the early thread by its id
    assert "block_stop_signals() before anything starts a thread" in out.stdout


AS_PID_1 = """
import logging, os, subprocess, sys
from worker.signals import StopControl, block_stop_signals
block_stop_signals()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
stop = StopControl(logging.getLogger("w"), stop_now_on_first=True)
stop.install()
print("pid", os.getpid(), flush=True)
subprocess.run(["sh", "-c", "kill -USR1 1"], check=True)  # as a Kubernetes preStop hook does
stop.finish.wait(10)
print("finish", stop.finish.is_set(), stop.now.is_set(), flush=True)
stop.now.wait()
print("now", flush=True)
"""


def test_the_worker_takes_its_signals_as_pid_1_of_a_container() -> None:
    """The kernel drops signals to a PID namespace's init unless it blocks or handles them."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bubblewrap is needed (apt-get install bubblewrap)"
    argv = [bwrap, "--unshare-pid", "--as-pid-1", "--dev-bind", "/", "/", "--proc", "/proc"]
    proc = subprocess.Popen([*argv, sys.executable, "-c", AS_PID_1], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "pid 1"
    assert read_until(proc, "finish") == "finish True False"  # SIGUSR1 from inside the container
    (worker,) = [pid for pid in descendants(proc.pid) if pid != proc.pid]
    os.kill(worker, signal.SIGTERM)  # from outside, as the container runtime sends it
    assert read_until(proc, "now") == "now"
    assert proc.wait(timeout=10) == 0


def test_the_command_line_starts_no_thread_before_work_blocks_the_stop_signals() -> None:
    """`autoresearch work` builds its parser (every command's module, the server's settings among
    them) before it can block the stop signals; a thread started then would drop them."""
    probe = (
        "import os; from cli.main import build_parser; build_parser(); "
        "print(len(os.listdir('/proc/self/task')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stdout + done.stderr
