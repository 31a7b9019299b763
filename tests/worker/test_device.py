"""Device pinning and the platform a worker reports (this machine has no GPU: the real probe says so)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.device import PlatformError, pin_cpu, pin_gpu, probe_cpu, probe_gpu


def test_cpu_platform_names_the_model_like_the_runner_and_memory() -> None:
    platform = probe_cpu()
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(line.split(":", 1)[1] for line in cpuinfo.splitlines() if line.startswith("model name"))
    assert platform.device == f"cpu ({model.strip()})"  # what RunResult.device says for a CPU run
    meminfo = Path("/proc/meminfo").read_text()
    total_kb = int(next(line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal:")))
    assert 0 < platform.memory_gb <= round(total_kb / 2**20, 1)
    assert not platform.cuda


def test_pin_gpu_counts_among_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert pin_gpu(1) == "6"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert pin_gpu(3) == "3"


def test_pin_gpu_out_of_range_says_which_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    with pytest.raises(PlatformError, match=r"--gpu 0\.\.1"):
        pin_gpu(2)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,6"


def test_no_gpu_is_an_error_that_points_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # restored after the test
    pin_cpu()  # hides every GPU, as --cpu does
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    with pytest.raises(PlatformError, match="pass --cpu"):
        probe_gpu()


def test_work_on_a_missing_gpu_exits_with_the_fix(tmp_path: Path) -> None:
    """The real command on this GPU-less machine: no silent fallback to the CPU."""
    env = {**os.environ, "AUTORESEARCH_WORKER_TOKEN": "unused"}
    args = ["--server", "http://127.0.0.1:9", "--gpu", "0", "--state-dir", str(tmp_path / "state")]
    out = subprocess.run(
        [sys.executable, "-m", "cli.main", "work", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "no CUDA GPU is visible with CUDA_VISIBLE_DEVICES=0; pass --cpu" in out.stderr
    assert not (tmp_path / "state").exists()  # it stopped before touching anything
