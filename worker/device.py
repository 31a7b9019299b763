"""Which device this worker runs on, pinned with CUDA_VISIBLE_DEVICES, and what it reports.

Results are compared only within one platform, so the worker reports its device name and
memory when it registers, named exactly as the runner names the device in each result. CUDA is
probed in a short child process, so that the long-lived worker does not set up CUDA state of
its own on the GPU that its experiments use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.runner.devices import device_name

# The device name comes from the runner's own function, so that the platform a worker registers
# is exactly the `device` of the results it reports.
_CUDA_PROBE = """
import json, torch
from harness.runner.devices import device_name
print(json.dumps([
    {"name": device_name(f"cuda:{i}"), "memory": torch.cuda.get_device_properties(i).total_memory}
    for i in range(torch.cuda.device_count())
]))
"""


class PlatformError(Exception):
    """The requested device does not exist here; the message says what to pass instead."""


@dataclass(frozen=True)
class Platform:
    device: str  # e.g. "NVIDIA H100 80GB HBM3" or "cpu (AMD EPYC 7B13)"
    memory_gb: float
    cuda: bool


def cuda_devices() -> list[dict[str, Any]]:
    """The CUDA devices visible under the current CUDA_VISIBLE_DEVICES (empty without CUDA)."""
    out = subprocess.run(
        [sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    if out.returncode != 0:
        raise PlatformError(f"probing CUDA with torch failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def pin_gpu(index: int) -> str:
    """Make GPU `index` (counted among those visible to this process) the only one visible."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not 0 <= index < len(ids):
            raise PlatformError(
                f"--gpu {index}: CUDA_VISIBLE_DEVICES={visible} makes only {len(ids)} GPU(s) visible "
                f"(use --gpu 0..{len(ids) - 1})"
            )
        chosen = ids[index]
    else:
        chosen = str(index)
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen


def pin_cpu() -> None:
    """Hide every GPU from the worker and the experiments it runs."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def probe_gpu() -> Platform:
    """The single GPU this worker is pinned to (call after `pin_gpu`, or with one GPU visible)."""
    devices = cuda_devices()
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not devices:
        where = f" with CUDA_VISIBLE_DEVICES={pinned}" if pinned is not None else ""
        raise PlatformError(f"no CUDA GPU is visible{where}; pass --cpu to run experiments on the CPU")
    if len(devices) > 1:
        last = len(devices) - 1
        raise PlatformError(
            f"{len(devices)} GPUs are visible; run one worker per GPU with --gpu 0 .. --gpu {last}"
        )
    (gpu,) = devices
    return Platform(device=str(gpu["name"]), memory_gb=round(int(gpu["memory"]) / 2**30, 1), cuda=True)


def probe_cpu() -> Platform:
    return Platform(device=device_name("cpu"), memory_gb=memory_gb(), cuda=False)


def memory_gb() -> float:
    """Usable RAM: the machine's, or the container's cgroup limit when that is lower."""
    total = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return round(total / 2**30, 1)
