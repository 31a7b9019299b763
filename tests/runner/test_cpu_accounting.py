"""CPU seconds of a process tree (harness.runner.limits.tree_cpu_seconds) and the scorer's clock
in CPU seconds (harness.runner.scoring.scorer.Clock): on a CPU the score phase is measured so, whatever
else the machine runs, and work the model hides in other processes or between batches counts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runner.launch import launch
from harness.runner.limits import cpu_seconds, default_limits, tree_cpu_seconds
from harness.runner.sandbox import SandboxSpec
from harness.runner.scoring.model_process import ModelFailure
from harness.runner.scoring.score_budget import ProcessBudget, measured_in_cpu_seconds
from harness.runner.scoring.scorer import Clock, Transfer

BURN_S = 0.6
# A parent that runs a child burning BURN_S of CPU, waits for it, prints, then sleeps: its own
# CPU is next to nothing; the child's is in its cutime once waited for.
PARENT = f"""
import subprocess, sys, time
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < {BURN_S}: pass"
subprocess.run([sys.executable, "-c", burn], check=True)
print("child done", flush=True)
time.sleep(60)
"""


def test_a_tree_counts_the_children_it_waited_for() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "child done\n"
        own, tree = cpu_seconds(parent.pid), tree_cpu_seconds([parent.pid])
        assert tree - own >= BURN_S * 0.9, (own, tree)
    finally:
        parent.kill()
        parent.wait()
    assert tree_cpu_seconds([parent.pid]) == 0.0  # gone: counts nothing (the clock keeps its reading)


def test_the_score_phase_is_measured_in_cpu_seconds_on_a_cpu_only() -> None:
    assert measured_in_cpu_seconds("cpu")
    assert not measured_in_cpu_seconds("cuda") and not measured_in_cpu_seconds("cuda:1")


class Meter:
    """Stands in for a model's tree: the CPU seconds the test says it used."""

    def __init__(self) -> None:
        self.seconds = 5.0  # before `go`: the sandbox's start and `import torch`, not counted

    def __call__(self) -> float:
        return self.seconds


def cpu_clock(meter: Meter, bound_s: float = 2.0) -> Clock:
    budget = ProcessBudget("eval", batches=1, startup_s=bound_s - 1.0, forward_s=1.0, logits_bytes=0)
    return Clock(budget, Transfer(), outer_deadline=time.monotonic() + 60, cpu=meter)


def test_a_cpu_clock_counts_from_go_whatever_the_wall_time_was() -> None:
    meter = Meter()
    clock = cpu_clock(meter)
    deadline, late = clock.window()  # `go`: counting starts here
    assert late.status == "timeout" and deadline == clock.outer_deadline  # `check` enforces the bound
    meter.seconds += 0.3
    clock.charge(100.0)  # 100 s of wall time on a loaded machine: not what is counted
    assert clock.used == pytest.approx(0.3) and clock.unit == "CPU s"
    clock.window()
    meter.seconds += 0.5  # between batches and inside them alike
    clock.check()
    assert clock.used == pytest.approx(0.8)


def test_a_cpu_clock_stops_a_model_past_its_bound_while_it_runs() -> None:
    meter = Meter()
    clock = cpu_clock(meter, bound_s=2.0)
    clock.window()
    meter.seconds += 1.9
    clock.check()
    meter.seconds += 0.2
    with pytest.raises(ModelFailure) as failure:
        clock.check()
    assert failure.value.error_class == "score_over_budget"
    assert "2.00 CPU s" in str(failure.value)


def test_a_cpu_clock_keeps_its_reading_when_the_tree_is_gone() -> None:
    meter = Meter()
    clock = cpu_clock(meter)
    clock.window()
    meter.seconds += 1.2
    clock.settle()
    meter.seconds = 0.0  # closed: /proc has nothing left to read
    clock.settle()
    assert clock.used == pytest.approx(1.2)


# Children that burn CPU one after another and are reaped by the kernel the moment they exit
# (SIGCHLD ignored, the process a subreaper): no process alive holds their time, neither in its own
# fields nor in its children's.
REAPED_CHAIN = f"""
import ctypes, os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
for _ in range(3):
    if os.fork() == 0:
        t = time.process_time()
        while time.process_time() - t < {BURN_S}: pass
        os._exit(0)
    time.sleep({BURN_S} * 2)
print("chain done", flush=True)
time.sleep(60)
"""


def test_a_sandbox_counts_the_cpu_of_children_the_kernel_reaped(tmp_path: Path) -> None:
    """The kernel's account of the sandbox's cgroup holds every process it ever ran."""
    limits = default_limits(1.0, "accounting-test")
    read, write = os.pipe()
    command = [sys.executable, "-c", REAPED_CHAIN]
    launched = launch(command, SandboxSpec(), sandboxed=True, limits=limits, stdout=write)
    os.close(write)
    try:
        assert launched.cgroup is not None and launched.cgroup.cpu_seconds() is not None
        with os.fdopen(read) as lines:
            assert lines.readline() == "chain done\n"
        assert launched.cpu_seconds() >= 3 * BURN_S * 0.9, launched.cpu_seconds()
        assert tree_cpu_seconds(launched.pids()) < BURN_S  # what reading live processes sees
    finally:
        launched.close()
