"""The training loader, torch side: packed token rows to (inputs, targets) batches on a device.

Inside the train sandbox, `ctx.loader(batch_size)` gets its rows from the trusted feeder over shared
memory (harness.runner.sandboxed.feed_client); the token files are not visible there. `packed_batches` is
the same loader in-process, for trusted code (benchmarks, tests). Both turn rows into int64
(inputs, targets) pairs in a background thread that keeps a few batches ready; on CUDA the pairs
are built in pinned memory and copied with non_blocking=True, so the copy overlaps the GPU's work.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from harness.data.packing import PackStats
from harness.data.rows import open_training_tokens, row_batches
from harness.data.tokens import TokenFile

PREFETCH_BATCHES = 4

Batch = tuple[torch.Tensor, torch.Tensor]


def pair_from_rows(rows: np.ndarray, pin_memory: bool = False) -> torch.Tensor:
    """An int64 [2, B, T] tensor from token rows [B, T + 1]: [0] the inputs, [1] the targets."""
    batch_size, row_len = rows.shape
    pair = torch.empty((2, batch_size, row_len - 1), dtype=torch.int64, pin_memory=pin_memory)
    view = pair.numpy()
    view[0] = rows[:, :-1]
    view[1] = rows[:, 1:]
    return pair


def pair_batches(
    token_file: TokenFile,
    batch_size: int,
    seq_len: int,
    seed: int,
    max_tokens: int = 0,
    pin_memory: bool = False,
    stats: PackStats | None = None,
) -> Iterator[torch.Tensor]:
    """Endless CPU int64 tensors [2, B, T]: [0] the inputs, [1] the targets (inputs shifted by one)."""
    for rows in row_batches(token_file, batch_size, seq_len, seed, max_tokens, stats):
        yield pair_from_rows(rows, pin_memory)


# Producer threads still running, so that they can be stopped before the interpreter shuts down:
# a daemon thread caught inside torch while Python finalizes aborts the whole process. A thread
# leaves the set when it ends, not when its consumer goes away, as it may still be mid-batch.
_producers: set[tuple[threading.Event, threading.Thread]] = set()


@atexit.register
def _stop_producers() -> None:
    running = list(_producers)
    for stop, _ in running:
        stop.set()
    for _, thread in running:
        thread.join(timeout=5)


def prefetched(source: Iterator[torch.Tensor], depth: int) -> Iterator[torch.Tensor]:
    """Run `source` in a background thread, `depth` items ahead; its errors surface here."""
    items: queue.Queue[tuple[str, object]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(kind: str, value: object) -> bool:
        """Hand one item over; False once the consumer has gone away."""
        while not stop.is_set():
            try:
                items.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in source:
                if not put("item", item):
                    return
            put("end", None)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put("error", exc)
        finally:
            _producers.discard(producer)

    thread = threading.Thread(target=produce, name="harness-loader", daemon=True)
    producer = (stop, thread)
    _producers.add(producer)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "item":
                yield value  # type: ignore[misc]
            elif kind == "error":
                raise value  # type: ignore[misc]
            else:
                return
    finally:
        stop.set()  # the thread ends after the item in hand (and leaves _producers then)


def on_device(pairs: Iterator[torch.Tensor], device: torch.device) -> Iterator[Batch]:
    """(inputs, targets) on `device` from [2, B, T] CPU pairs (pinned on CUDA), prefetched.

    The prefetch thread starts at the first next(), not before: creating a loader asks for nothing.
    """
    on_cuda = device.type == "cuda"
    for pair in prefetched(pairs, PREFETCH_BATCHES):
        moved = pair.to(device, non_blocking=on_cuda)
        yield moved[0], moved[1]


def packed_batches(
    train_dir: Path,
    batch_size: int,
    seq_len: int,
    bos_id: int,
    device: torch.device,
    seed: int,
    max_tokens: int = 0,
) -> Iterator[Batch]:
    """Endless (inputs, targets) int64 [batch_size, seq_len] batches on `device`, in-process.

    Every row starts with BOS, holds whole documents placed best-fit (one cropped only when none
    fits), and targets are the inputs shifted by one token.
    """
    if batch_size < 1 or seq_len < 1:
        raise ValueError(f"batch_size ({batch_size}) and seq_len ({seq_len}) must be positive")
    token_file = open_training_tokens(Path(train_dir), bos_id, max_tokens)
    device = torch.device(device)
    pairs = pair_batches(token_file, batch_size, seq_len, seed, max_tokens, pin_memory=device.type == "cuda")
    yield from on_device(pairs, device)
