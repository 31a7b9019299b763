"""The training data loader: prepared token files to packed (inputs, targets) batches.

This is what `ctx.loader(batch_size)` returns inside the sandbox. It reads only the training
token folder (read-only; one pread per document) and never tokenizes text. Documents are visited in a
fresh seeded permutation each epoch and packed best-fit (harness.data.packing). A background
thread prepares the next batches while the model trains; on CUDA they are built in pinned memory
and copied with non_blocking=True.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from harness.data.errors import DataError
from harness.data.packing import BUFFER_DOCS, PackStats, best_fit_batches
from harness.data.tokens import TokenFile, open_token_dir

PREFETCH_BATCHES = 4
SPAN_CHUNK = 4096

Batch = tuple[torch.Tensor, torch.Tensor]


def epoch_spans(offsets: np.ndarray, num_docs: int, seed: int) -> Iterator[tuple[int, int]]:
    """(start, length) of the first `num_docs` documents, in a new seeded order every epoch, forever."""
    epoch = 0
    while True:
        order = np.random.default_rng((seed, epoch)).permutation(num_docs)
        for first in range(0, num_docs, SPAN_CHUNK):
            chosen = order[first : first + SPAN_CHUNK]
            starts = offsets[chosen]
            yield from zip(starts.tolist(), (offsets[chosen + 1] - starts).tolist(), strict=True)
        epoch += 1


def usable_docs(token_file: TokenFile, max_tokens: int) -> int:
    """How many leading documents fit in `max_tokens` (0 = all of them)."""
    if max_tokens <= 0:
        return token_file.num_docs
    count = int(np.searchsorted(token_file.offsets, max_tokens, side="right")) - 1
    if count < 1:
        raise DataError(
            f"TRAIN_TOKENS_MAX={max_tokens} is smaller than the first training document "
            f"({int(token_file.offsets[1])} tokens); raise it or set it to 0 (all tokens)"
        )
    return count


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
    spans = epoch_spans(token_file.offsets, usable_docs(token_file, max_tokens), seed)
    packed = best_fit_batches(
        token_file.read_into, token_file.tokens.dtype, spans, seq_len + 1, batch_size, BUFFER_DOCS, stats
    )
    for rows in packed:
        pair = torch.empty((2, batch_size, seq_len), dtype=torch.int64, pin_memory=pin_memory)
        view = pair.numpy()
        view[0] = rows[:, :-1]
        view[1] = rows[:, 1:]
        yield pair


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


def packed_batches(
    train_dir: Path,
    batch_size: int,
    seq_len: int,
    bos_id: int,
    device: torch.device,
    seed: int,
    max_tokens: int = 0,
) -> Iterator[Batch]:
    """Endless (inputs, targets) int64 [batch_size, seq_len] batches on `device`.

    Every row starts with BOS, holds whole documents placed best-fit (one cropped only when none
    fits), and targets are the inputs shifted by one token.
    """
    if batch_size < 1 or seq_len < 1:
        raise ValueError(f"batch_size ({batch_size}) and seq_len ({seq_len}) must be positive")
    token_file = open_token_dir(Path(train_dir))
    if token_file.bos_id != bos_id:
        raise DataError(
            f"{train_dir}: tokens were prepared with BOS id {token_file.bos_id}, not {bos_id}; "
            "the tokenizer changed, run `autoresearch prepare` again"
        )
    device = torch.device(device)
    on_cuda = device.type == "cuda"
    source = pair_batches(token_file, batch_size, seq_len, seed, max_tokens, pin_memory=on_cuda)
    for pair in prefetched(source, PREFETCH_BATCHES):
        moved = pair.to(device, non_blocking=on_cuda)
        yield moved[0], moved[1]
