"""SIGTERM handling in a real process: first finishes the run, second (or --stop-now) cancels it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

SCRIPT = """
import logging, sys, threading
from worker.signals import StopControl
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
