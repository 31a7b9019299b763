"""Loader throughput: the harness loader against the straightforward approach, same documents.

    python bench/loader.py [--seq-len 2048] [--batch-size 8] [--batches 40] [--vocab 8192]

Both sides produce the same (inputs, targets) int64 batches from the same documents in the same
order (the script checks that the batches are identical), on one thread each:

- reference: text from parquet, tokenized on the fly with tiktoken (one thread), BOS-aligned best
  fit by a Python list scan over a 1000-document buffer for each placement, a tensor copy per
  document (the nanochat-style loader);
- harness: prepared token files (memory-mapped) packed by harness.loader.pair_batches.

It prints tokens/s of each and the ratio, and the crop fraction of each. Then it runs
packed_batches (with its background prefetch thread) under a consumer that takes as long per
batch as an H100 needs for the baseline model (about 1.7 M tokens/s, waiting with the GIL
released, as a CUDA step does) and prints how long the consumer waits for each batch. Data: the
built-in corpus prepared with the given vocabulary under var/bench-data (prepared on first use).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from harness.config import load_settings
from harness.data.packing import BUFFER_DOCS, PackStats
from harness.data.shards import iter_texts
from harness.data.sources import train_shards
from harness.data.tokens import TokenFile, open_token_dir
from harness.loader import epoch_spans, packed_batches, pair_batches
from harness.prepare import prepare
from harness.tokenizer import Tokenizer, load_tokenizer

DATA_DIR = Path(__file__).resolve().parents[1] / "var" / "bench-data"
TOKENIZE_BATCH = 128
H100_TOKENS_PER_S = 1.7e6  # what an H100 consumes with the baseline model

Batch = tuple[torch.Tensor, torch.Tensor]


def reference_batches(
    texts: Iterator[str], tokenizer: Tokenizer, batch_size: int, seq_len: int, stats: PackStats
) -> Iterator[Batch]:
    """The straightforward loader: tokenize on the fly, scan the buffer, copy a tensor per document."""
    row_capacity = seq_len + 1
    pending: list[list[int]] = []
    buffer: list[list[int]] = []

    def next_doc() -> list[int]:
        nonlocal pending
        if not pending:
            chunk = [text for _, text in zip(range(TOKENIZE_BATCH), texts, strict=False)]
            pending = [[tokenizer.bos_id, *ids] for ids in tokenizer.encode_batch(chunk, num_threads=1)]
            pending.reverse()
        return pending.pop()

    while True:
        rows = torch.empty((batch_size, row_capacity), dtype=torch.long)
        for r in range(batch_size):
            pos = 0
            while pos < row_capacity:
                while len(buffer) < BUFFER_DOCS:
                    buffer.append(next_doc())
                remaining = row_capacity - pos
                best, best_len = -1, 0
                for i, doc in enumerate(buffer):
                    if best_len < len(doc) <= remaining:
                        best, best_len = i, len(doc)
                if best >= 0:
                    doc = buffer.pop(best)
                    rows[r, pos : pos + len(doc)] = torch.tensor(doc, dtype=torch.long)
                    pos += len(doc)
                    stats.taken_tokens += len(doc)
                else:
                    shortest = min(range(len(buffer)), key=lambda i: len(buffer[i]))
                    doc = buffer.pop(shortest)
                    rows[r, pos:] = torch.tensor(doc[:remaining], dtype=torch.long)
                    stats.cropped_docs += 1
                    stats.dropped_tokens += len(doc) - remaining
                    stats.taken_tokens += len(doc)
                    pos += remaining
        yield rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def texts_in_loader_order(token_file: TokenFile, raw_dir: Path, seed: int) -> Iterator[str]:
    """The training texts in the order the harness loader visits their documents."""
    texts = list(iter_texts(train_shards(raw_dir)))
    assert len(texts) == token_file.num_docs, "token files and text shards disagree"
    for start, _ in epoch_spans(token_file.offsets, token_file.num_docs, seed):
        yield texts[int(np.searchsorted(token_file.offsets, start))]


def timed(make: Callable[[], Iterator[Batch]], batches: int, repeats: int) -> tuple[float, list[Tensor]]:
    """Median seconds to draw `batches` batches from a fresh iterator, and the last run's inputs."""
    times = []
    for _ in range(repeats):
        iterator = make()
        start = time.perf_counter()
        got = [next(iterator)[0] for _ in range(batches)]
        times.append(time.perf_counter() - start)
    return statistics.median(times), got


def consumer_waits(batches: Iterator[Batch], count: int, step: float) -> list[float]:
    """Seconds spent waiting in next() per batch, by a consumer that works `step` seconds per batch."""
    next(batches)  # the first batch includes opening the files and filling the buffer
    waits = []
    for _ in range(count):
        time.sleep(step)  # GIL released, as while the GPU computes
        start = time.perf_counter()
        next(batches)
        waits.append(time.perf_counter() - start)
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    settings = load_settings(
        "h100", data_source="builtin", data_dir=DATA_DIR, vocab_size=args.vocab, eval_tokens=args.seq_len * 16
    )
    settings = settings.model_copy(update={"seq_len": args.seq_len})
    paths = prepare(settings, progress=False)
    tokenizer = load_tokenizer(paths.tokenizer_dir)
    token_file = open_token_dir(paths.train_dir)
    seed = 0
    tokens_per_batch = args.batch_size * args.seq_len
    lengths = np.diff(token_file.offsets)
    print(
        f"corpus: {token_file.num_docs} documents, {int(token_file.offsets[-1]):,} tokens "
        f"(median document {int(np.median(lengths))} tokens), vocab {tokenizer.vocab_size}, "
        f"T={args.seq_len}, B={args.batch_size}, {args.batches} batches ({args.batches * tokens_per_batch:,} "
        "tokens), 1 thread each"
    )

    ref_stats = PackStats()
    ref_seconds, ref_inputs = timed(
        lambda: reference_batches(
            texts_in_loader_order(token_file, paths.raw_dir, seed),
            tokenizer,
            args.batch_size,
            args.seq_len,
            ref_stats,
        ),
        args.batches,
        args.repeats,
    )
    our_stats = PackStats()
    our_seconds, our_inputs = timed(
        lambda: (
            (pair[0], pair[1])
            for pair in pair_batches(token_file, args.batch_size, args.seq_len, seed, stats=our_stats)
        ),
        args.batches,
        max(args.repeats, 5),
    )
    identical = all(torch.equal(a, b) for a, b in zip(ref_inputs, our_inputs, strict=True))
    total = args.batches * tokens_per_batch
    ref_rate, our_rate = total / ref_seconds, total / our_seconds
    runs_ref = args.repeats
    runs_our = max(args.repeats, 5)
    print(f"reference (tiktoken on the fly, list scan): {ref_rate / 1e6:8.2f} M tokens/s")
    print(f"harness pair_batches (token files):          {our_rate / 1e6:8.2f} M tokens/s")
    print(f"speedup: {our_rate / ref_rate:.1f}x")
    print(
        f"crop fraction (dropped / taken tokens): reference {ref_stats.dropped_tokens / runs_ref:,.0f} / "
        f"{ref_stats.taken_tokens / runs_ref:,.0f} = {ref_stats.crop_fraction:.4f}, harness "
        f"{our_stats.dropped_tokens / runs_our:,.0f} / {our_stats.taken_tokens / runs_our:,.0f} = "
        f"{our_stats.crop_fraction:.4f}"
    )
    print(f"identical batches: {identical}")
    step = tokens_per_batch / H100_TOKENS_PER_S
    prefetching = packed_batches(
        paths.train_dir, args.batch_size, args.seq_len, tokenizer.bos_id, torch.device("cpu"), seed
    )
    waits = consumer_waits(prefetching, args.batches, step)
    print(
        f"packed_batches with prefetch, consumer step {step * 1e3:.1f} ms (H100 pace): wait per batch "
        f"median {statistics.median(waits) * 1e6:.0f} us, max {max(waits) * 1e6:.0f} us "
        f"(after the first batch; {sum(waits) / (step * len(waits)) * 100:.2f}% of step time)"
    )


if __name__ == "__main__":
    main()
