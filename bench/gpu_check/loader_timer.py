"""Appended to the baseline train.py by the GPU check (bench/gpu_check/baseline.py).

It times how long the training loop waits in the harness loader's next() in each training step
and prints one line, `GPU_CHECK_LOADER {json}`, when training ends. Nothing else changes: model,
optimizer, batches and schedule are the baseline's. Like anything train.py prints, the line is
informational; the harness never reads a score from it. No `from __future__` import here: this
text lands in the middle of the candidate file.
"""

import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

GPU_CHECK_LOADER_TAG = "GPU_CHECK_LOADER"
# The first steps include torch.compile and the first CUDA work; they are left out of the figures.
GPU_CHECK_WARMUP_STEPS = 2


class GpuCheckTimedContext:
    """The harness's ctx, with the loader's next() timed and steps delimited by ctx.log calls."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self.waits: list[float] = []  # seconds spent in next() during each step
        self.steps: list[float] = []  # seconds from one ctx.log to the next
        self.micro_batches: list[int] = []  # batches drawn during each step
        self._wait = 0.0
        self._drawn = 0
        self._last = time.perf_counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def loader(self, batch_size: int) -> Iterator[Any]:
        batches = self._ctx.loader(batch_size)
        while True:
            started = time.perf_counter()
            batch = next(batches)
            self._wait += time.perf_counter() - started
            self._drawn += 1
            yield batch

    def log(self, step: int, loss: float, **extra: float) -> None:
        now = time.perf_counter()
        self.waits.append(self._wait)
        self.steps.append(now - self._last)
        self.micro_batches.append(self._drawn)
        self._wait, self._drawn, self._last = 0.0, 0, now
        self._ctx.log(step=step, loss=loss, **extra)

    def summary(self) -> dict[str, Any]:
        waits = self.waits[GPU_CHECK_WARMUP_STEPS:]
        steps = self.steps[GPU_CHECK_WARMUP_STEPS:]
        figures: dict[str, Any] = {"steps": len(self.steps), "measured_steps": len(steps)}
        if steps:
            ordered = sorted(waits)
            figures.update(
                micro_batches_per_step=statistics.median(self.micro_batches[GPU_CHECK_WARMUP_STEPS:]),
                wait_ms_median=1e3 * statistics.median(waits),
                wait_ms_p90=1e3 * ordered[int(0.9 * (len(ordered) - 1))],
                wait_ms_max=1e3 * ordered[-1],
                step_ms_median=1e3 * statistics.median(steps),
                wait_fraction=sum(waits) / sum(steps),
            )
        return figures


def gpu_check_timed_train(train: Callable[[Any, Any], None], model: Any, ctx: Any) -> None:
    """Run the baseline's train() with the timed ctx; print the figures however it ends."""
    timed = GpuCheckTimedContext(ctx)
    try:
        train(model, timed)
    finally:
        print(f"{GPU_CHECK_LOADER_TAG} {json.dumps(timed.summary())}", flush=True)
