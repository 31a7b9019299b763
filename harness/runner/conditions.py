"""The conditions a run ran under, read by the harness whatever the candidate does.

At a fixed time budget a slower machine trains fewer tokens, so a result says as much about the
machine as about the train.py: a GPU that runs hot, a host that got busier. So every run records
a reading of its machine that no candidate can influence:

- `speed_gflops`: a fixed piece of work (matrix products of a fixed size, `SPEED_WORK` per device
  type) timed in the train sandbox right after `go`, before train.py is imported. The first
  `speed` message of a run therefore always comes from harness code; a candidate's later ones are
  ignored (harness.runner.train_phase.handle);
- `load_1m`: the host's load average when the run started;
- on CUDA, the GPU's SM clock (MHz), temperature (C) and power draw (W) from `nvidia-smi` on the
  host, when the run started.

The server stores them with the result, shows them, and its decisions can compare like with like
(docs/api.md, "Decisions").
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from protocol.result import RunConditions

# (matrix size, products, dtype name) of the fixed work, by device type: about 50 ms on this
# 2-core machine's CPU, a few tens of ms on an H100.
SPEED_WORK = {"cpu": (256, 8, "float32"), "cuda": (4096, 100, "bfloat16")}
NVIDIA_SMI_TIMEOUT_S = 5.0
GPU_FIELDS = ("clocks.sm", "temperature.gpu", "power.draw")


def measure_speed(device: Any) -> float:
    """GFLOP/s of the fixed work on `device` (a torch.device), timed on the wall clock (inside the
    train sandbox, before any candidate code)."""
    import torch

    size, products, dtype = SPEED_WORK["cuda" if device.type == "cuda" else "cpu"]
    left = torch.ones(size, size, dtype=getattr(torch, dtype), device=device)
    right = torch.ones(size, size, dtype=left.dtype, device=device) / size
    torch.mm(left, right)  # kernels chosen, memory touched: not timed
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(products):
        torch.mm(left, right)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 2 * size**3 * products / max(time.perf_counter() - started, 1e-9) / 1e9


def gpu_readings(device: str) -> dict[str, float]:
    """The GPU's SM clock, temperature and power from nvidia-smi (empty where there is none)."""
    if not device.startswith("cuda"):
        return {}
    index = device.partition(":")[2] or "0"
    visible = [part for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part]
    if int(index) < len(visible):  # nvidia-smi names GPUs as the host does (index or UUID)
        index = visible[int(index)]
    query = ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(
            [*query, "-i", index], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S
        )
        values = [float(part) for part in done.stdout.strip().split(",")]
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    if done.returncode != 0 or len(values) != len(GPU_FIELDS):
        return {}
    return dict(zip(("gpu_sm_clock_mhz", "gpu_temp_c", "gpu_power_w"), values, strict=True))


def host_conditions(device: str) -> RunConditions:
    """What the host says when a run starts (the speed comes later, from the sandbox)."""
    return RunConditions(load_1m=round(os.getloadavg()[0], 2), **gpu_readings(device))
