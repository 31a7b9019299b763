"""The device an experiment runs on: its name and, where known, its peak FLOP/s for MFU."""

from __future__ import annotations

import platform
from pathlib import Path

# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' data sheets; MFU is reported only for
# these. The first name contained in the device name wins.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.5e12),
    ("H100 PCIe", 756.0e12),
    ("H100", 989.5e12),
    ("A100", 312.0e12),
)


def resolve_device(requested: str | None) -> str:
    """`requested`, or cuda when a GPU is visible, else cpu."""
    if requested == "cpu":  # asking torch costs its import: a worker's start (docs/benchmarks.md)
        return requested
    import torch

    if requested:
        if requested.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {requested!r} was asked for, but torch sees no CUDA GPU")
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return f"cpu ({cpu_model()})"


def platform_device(platform: str | None) -> str | None:
    """The device type (cpu, cuda) of a platform as device_name writes it (None: no platform)."""
    if platform is None:
        return None
    return "cpu" if platform == "cpu" or platform.startswith("cpu (") else "cuda"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown"


def peak_flops(name: str) -> float | None:
    for key, flops in PEAK_BF16_FLOPS:
        if key in name:
            return flops
    return None


def flops_per_token(declared: float | None, num_params: int | None) -> float | None:
    """Training FLOPs per token: what the model declares (`model.flops_per_token()`, the anchor's
    count in the baseline: 6 per matmul weight other than the token embedding, plus attention's
    12 x layers x width x sequence length), else 6 per parameter."""
    if declared is not None:
        return declared
    return 6.0 * num_params if num_params else None


def mfu_percent(flops: float | None, tokens: int | None, seconds: float, peak: float | None) -> float | None:
    """Model FLOP utilisation: `flops` per token over `tokens` in `seconds`, against the bf16 peak."""
    if not (flops and tokens and peak and seconds > 0):
        return None
    return 100.0 * flops * tokens / (seconds * peak)
