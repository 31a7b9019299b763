"""BOS-aligned best-fit packing of tokenized documents into rows of exactly `row_len` tokens.

Documents come from a stream into a buffer of `buffer_size` candidates. Each row is filled by
repeatedly taking the longest buffered document that fits the space left (the earliest one
among equals); only when none fits is the shortest buffered document cropped to fill the row,
and the rest of it dropped. Every document starts with BOS, so every row does too; rows have no
padding. This is the same rule as the straightforward list scan (see bench/loader.py), but each
choice costs O(log n) instead of a scan of the whole buffer: candidates are kept in FIFO queues
per length, with the distinct lengths in a sorted list.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

import numpy as np

# Candidates held for best fit: more gives better fits (fewer crops) at a little more memory.
BUFFER_DOCS = 1000

# Fills `out` (a contiguous 1-D slice of a row) with the tokens that start at index `start`.
ReadInto = Callable[[np.ndarray, int], None]


def array_reader(tokens: np.ndarray) -> ReadInto:
    """Read documents from tokens held in memory (or memory-mapped)."""

    def read_into(out: np.ndarray, start: int) -> None:
        out[:] = tokens[start : start + len(out)]

    return read_into


@dataclass
class PackStats:
    """What packing did so far; `crop_fraction` is the share of taken tokens that were dropped."""

    rows: int = 0
    cropped_docs: int = 0
    dropped_tokens: int = 0
    taken_tokens: int = 0

    @property
    def crop_fraction(self) -> float:
        return self.dropped_tokens / self.taken_tokens if self.taken_tokens else 0.0


def best_fit_batches(
    read_into: ReadInto,
    dtype: np.dtype,
    spans: Iterator[tuple[int, int]],
    row_len: int,
    batch_rows: int,
    buffer_size: int = BUFFER_DOCS,
    stats: PackStats | None = None,
) -> Iterator[np.ndarray]:
    """Yield [batch_rows, row_len] arrays of `dtype` packed from document `spans`.

    `spans` gives (start, length) of each document, in the order to use them; `read_into` copies
    a document's first tokens into its place in a row. When `spans` runs out, the rows completed
    so far are yielded as a last, shorter batch and the generator ends; an endless `spans` gives
    endless batches.
    """
    if row_len < 1 or batch_rows < 1 or buffer_size < 1:
        raise ValueError("row_len, batch_rows and buffer_size must be positive")
    spans = iter(spans)
    stats = stats if stats is not None else PackStats()
    lengths: list[int] = []  # distinct lengths present in the buffer, ascending
    queues: dict[int, deque[int]] = {}  # length -> starts of buffered documents, oldest first

    def add(span: tuple[int, int]) -> None:
        start, length = span
        queue = queues.get(length)
        if queue is None:
            queues[length] = deque((start,))
            insort(lengths, length)
        else:
            queue.append(start)

    for span in islice(spans, buffer_size):  # initial fill
        add(span)

    while True:
        batch = np.empty((batch_rows, row_len), dtype=dtype)
        flat = batch.reshape(-1)
        for row in range(batch_rows):
            end = (row + 1) * row_len
            pos = row * row_len
            while pos < end:
                if not lengths:  # out of documents: the unfinished row is dropped
                    stats.dropped_tokens += pos - row * row_len
                    if row:
                        yield batch[:row]
                    return
                space = end - pos
                index = bisect_right(lengths, space) - 1
                if index >= 0:
                    length = lengths[index]
                    take = length
                else:  # nothing fits: crop the shortest
                    index = 0
                    length = lengths[0]
                    take = space
                    stats.cropped_docs += 1
                    stats.dropped_tokens += length - space
                queue = queues[length]
                start = queue.popleft()
                if not queue:
                    del queues[length]
                    del lengths[index]
                read_into(flat[pos : pos + take], start)
                pos += take
                stats.taken_tokens += length
                nxt = next(spans, None)
                if nxt is not None:
                    add(nxt)
            stats.rows += 1
        yield batch
