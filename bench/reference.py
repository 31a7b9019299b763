"""The reference that benchmarks measure in the same run as their figures: one new interpreter
importing torch. Its cost moves with this shared machine's speed as the figures do, so a figure
is read against it (docs/benchmarks.md)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ImportTorch:
    seconds: float  # wall
    cpu_seconds: float  # user + system of the interpreter


def import_torch() -> ImportTorch:
    """Start `python -c "import torch"` and wait for it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ImportTorch(seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
