"""The `ctx` object that `train.py` receives: the harness's read-only view of one experiment."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class TrainContext:
    """What `build_model(ctx)` and `train(model, ctx)` may use. Nothing here reaches the score."""

    device: torch.device
    vocab_size: int
    seq_len: int
    time_budget: float
    seed: int
    bos_id: int
    peak_flops: float | None  # the device's peak FLOP/s for MFU, None when unknown
    _batches: Callable[[int], Iterator[Batch]] = field(repr=False)
    _time_left: Callable[[], float] = field(repr=False)
    _log: Callable[..., None] = field(repr=False)

    def time_left(self) -> float:
        """Seconds of training budget left, by the harness's clock."""
        return self._time_left()

    def loader(self, batch_size: int) -> Iterator[Batch]:
        """Endless (inputs, targets) batches of shape [batch_size, seq_len] on `device`."""
        return self._batches(batch_size)

    def log(self, step: int, loss: float, **extra: float) -> None:
        """Report live progress (step, loss, e.g. tokens_per_s=...). Cheap; call every step."""
        self._log(step=step, loss=loss, **extra)
