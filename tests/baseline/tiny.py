"""Helpers of the baseline train.py tests: a fresh copy of the module, tiny settings, real contexts.

The module is loaded from its file the way the runner does, so every test gets its own copy whose
constants it may change. Training runs use the real TrainContext with a virtual clock that
advances per batch drawn, so a run has the same length on a fast or a busy machine.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness.context import Batch, TrainContext

BASELINE = Path(__file__).resolve().parents[2] / "harness" / "baseline" / "train.py"
VOCAB = 64
SEQ_LEN = 32


def load_baseline(**cpu_settings: Any) -> ModuleType:
    """A fresh copy of the baseline train.py; `cpu_settings` replace fields of its CPU settings."""
    spec = importlib.util.spec_from_file_location("baseline_train_under_test", BASELINE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tiny = {"depth": 2, "width": 64, "head_dim": 16, "device_batch": 4, "total_batch_tokens": 4 * SEQ_LEN}
    tiny.update(bf16=False, compile=False)
    module.DEVICE_SETTINGS["cpu"] = dataclasses.replace(module.DEVICE_SETTINGS["cpu"], **tiny | cpu_settings)
    return module


class VirtualClock:
    """The training clock: `budget` seconds, of which each batch drawn uses `per_batch`."""

    def __init__(self, budget: float, per_batch: float) -> None:
        self.budget = budget
        self.per_batch = per_batch
        self.drawn = 0

    def time_left(self) -> float:
        return self.budget - self.drawn * self.per_batch


def successor_batches(
    vocab: int, seq_len: int, seed: int, rows_seed: int = 0
) -> Callable[[int], Iterator[Batch]]:
    """Random but learnable rows: each token is followed by its image under a permutation fixed by
    `seed`; the rows start at random tokens drawn with `rows_seed`."""
    successor = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))
    generator = torch.Generator().manual_seed(rows_seed)

    def batches(batch_size: int) -> Iterator[Batch]:
        while True:
            column = torch.randint(vocab, (batch_size,), generator=generator)
            columns = [column]
            for _ in range(seq_len):
                columns.append(successor[columns[-1]])
            rows = torch.stack(columns, dim=1)
            yield rows[:, :-1], rows[:, 1:]

    return batches


def make_ctx(
    clock: VirtualClock,
    logs: list[dict[str, float]],
    batches: Callable[[int], Iterator[Batch]] | None = None,
    seed: int = 0,
) -> TrainContext:
    """A real TrainContext over `batches` (default: successor rows) timed by `clock`."""
    source = batches or successor_batches(VOCAB, SEQ_LEN, seed)

    def counted(batch_size: int) -> Iterator[Batch]:
        for batch in source(batch_size):
            clock.drawn += 1
            yield batch

    return TrainContext(
        device=torch.device("cpu"),
        vocab_size=VOCAB,
        seq_len=SEQ_LEN,
        time_budget=clock.budget,
        seed=seed,
        bos_id=0,
        peak_flops=None,
        _batches=counted,
        _time_left=clock.time_left,
        _log=lambda **fields: logs.append(fields),
    )
