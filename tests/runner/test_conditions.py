"""The conditions a run records (harness.runner.conditions): the GPU's readings from nvidia-smi on
the host, here a stand-in script on PATH (this machine has no GPU), and the speed message only the
harness can send first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.runner.conditions import gpu_readings, host_conditions
from harness.runner.train_phase import TrainOutcome, handle

NVIDIA_SMI = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/asked"
echo "1980, 65, 350.5"
"""


@pytest.fixture
def nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the driver's tool: it answers as nvidia-smi does and notes what it was asked."""
    script = tmp_path / "nvidia-smi"
    script.write_text(NVIDIA_SMI)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return tmp_path / "asked"


def test_gpu_readings_name_the_gpu_as_the_host_does(
    nvidia_smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gpu_readings("cpu") == {} and not nvidia_smi.exists()  # no GPU, nothing asked
    assert gpu_readings("cuda:1") == {"gpu_sm_clock_mhz": 1980.0, "gpu_temp_c": 65.0, "gpu_power_w": 350.5}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-5e1f")
    gpu_readings("cuda:1")
    conditions = host_conditions("cuda")
    assert conditions.gpu_temp_c == 65.0 and conditions.load_1m is not None
    asked = [line.split()[-1] for line in nvidia_smi.read_text().splitlines()]
    assert asked == ["1", "GPU-5e1f", "3"]


def test_a_gpu_the_tool_cannot_read_gives_no_readings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "nvidia-smi"
    broken.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert gpu_readings("cuda:0") == {}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_readings("cuda:0") == {}  # none installed


def test_only_the_first_speed_message_counts() -> None:
    """The train entry sends it at `go`, before train.py is imported; anything later is the
    candidate's (a forged one), and values out of range are none."""
    outcome = TrainOutcome()
    handle({"ev": "speed", "gflops": 42.5}, 0.1, outcome)
    handle({"ev": "speed", "gflops": 1e6}, 0.2, outcome)
    assert outcome.speed_gflops == 42.5
    forged_first = TrainOutcome()
    handle({"ev": "speed", "gflops": -1}, 0.1, forged_first)
    handle({"ev": "speed", "gflops": 42.5}, 0.2, forged_first)
    assert forged_first.speed_gflops is None
