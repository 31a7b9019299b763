"""Where a run's time goes, step by step: wall and CPU seconds of each phase.

The runner records the steps of its own process and adds those the trusted scorer reports
(named `score/...`); `bench/runner_overhead.py --phases` prints them. A phase's `cpu` is the
recording process's own (all its threads, time.process_time); `sandbox_cpu` is that of the model
sandbox the phase waited on, where there is one (from /proc of its processes). A name recorded
again adds to the same phase (`count` says how often).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.runner.limits import tree_cpu_seconds


@dataclass
class Phase:
    name: str
    wall: float = 0.0
    cpu: float = 0.0
    sandbox_cpu: float = 0.0
    count: int = 0


class Phases:
    def __init__(self) -> None:
        self.items: dict[str, Phase] = {}

    def add(self, name: str, wall: float, cpu: float, sandbox_cpu: float = 0.0, count: int = 1) -> None:
        phase = self.items.setdefault(name, Phase(name))
        phase.wall += wall
        phase.cpu += cpu
        phase.sandbox_cpu += sandbox_cpu
        phase.count += count

    @contextlib.contextmanager
    def __call__(self, name: str, sandbox: Sequence[int] = ()) -> Iterator[None]:
        """Record the block as phase `name`, with the CPU of the processes `sandbox` too."""
        sandbox_before = tree_cpu_seconds(sandbox)
        wall, cpu = time.monotonic(), time.process_time()
        try:
            yield
        finally:
            self.add(
                name,
                time.monotonic() - wall,
                time.process_time() - cpu,
                tree_cpu_seconds(sandbox) - sandbox_before,
            )

    def as_json(self) -> list[dict[str, Any]]:
        return [asdict(phase) for phase in self.items.values()]

    def extend(self, items: list[dict[str, Any]], prefix: str) -> None:
        for item in items:
            self.add(prefix + item["name"], item["wall"], item["cpu"], item["sandbox_cpu"], item["count"])
