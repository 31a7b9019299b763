"""Loader throughput: the harness loader against the straightforward approach, same documents.

    python bench/loader.py [--seq-len 2048] [--batch-size 8] [--batches 40] [--vocab 8192]

Both sides produce the same (inputs, targets) int64 batches from the same documents in the same
order (the script checks that the batches are identical), on one thread each:

- reference: text from parquet, tokenized on the fly with tiktoken (one thread), BOS-aligned best
  fit by a Python list scan over a 1000-document buffer for each placement, a tensor copy per
  document (the nanochat-style loader);
- harness: prepared token files (memory-mapped) packed by harness.loader.pair_batches.

Then the path a train sandbox uses: the trusted feeder (harness.runner.feeder, a thread of this
process) packs into shared memory, and a separate process (as the sandbox is) draws batches
through harness.runner.sandboxed.feed_client (its prefetch thread turns slots into int64 pairs). It prints
tokens/s of each and the ratios, and the crop fraction. Last, the feeder path under a consumer
that takes as long per batch as an H100 needs for the baseline model (about 1.7 M tokens/s,
waiting with the GIL released, as a CUDA step does): how long the consumer waits for each batch,
against the in-process loader (harness.loader.packed_batches, its own prefetch thread) measured
the same way in the same run.
Data: the built-in corpus prepared with the given vocabulary under var/bench-data (prepared on
first use).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from harness.config import load_settings
from harness.data.packing import BUFFER_DOCS, PackStats
from harness.data.rows import epoch_spans
from harness.data.shards import iter_texts
from harness.data.sources import train_shards
from harness.data.tokens import TokenFile, open_token_dir
from harness.loader import packed_batches, pair_batches
from harness.prepare import prepare
from harness.runner.feeder import Feeder, FeedJob
from harness.runner.sandboxed.feed_client import FeedClient
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


def digest(inputs: list[Tensor]) -> str:
    return hashlib.sha256(b"".join(tensor.numpy().tobytes() for tensor in inputs)).hexdigest()


def client(fd: int, batch_size: int, batches: int, repeats: int) -> None:
    """The sandbox side, in its own process: draw batches through the feeder and report as JSON."""
    torch.set_num_threads(1)
    feed = FeedClient(fd, on_first_request=lambda: None)
    cpu = torch.device("cpu")
    seconds, inputs = timed(lambda: feed.batches(batch_size, cpu), batches, repeats)
    step = batch_size * inputs[0].shape[1] / H100_TOKENS_PER_S
    waits = consumer_waits(feed.batches(batch_size, cpu), batches, step)
    print(json.dumps({"seconds": seconds, "digest": digest(inputs), "waits": waits, "step": step}))


def through_feeder(job: FeedJob, seed: int, args: argparse.Namespace, repeats: int) -> dict:
    """Run `client` in a child process against a feeder in this one."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    feeder = Feeder(job, ours)
    feeder.start(seed)
    command = [sys.executable, __file__, "--client", str(theirs.fileno()), str(args.batch_size)]
    command += [str(args.batches), str(repeats)]
    try:
        done = subprocess.run(command, pass_fds=[theirs.fileno()], capture_output=True, text=True, check=True)
    finally:
        theirs.close()
        feeder.close()
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--client", nargs=4, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client(*args.client)
        return
    torch.set_num_threads(1)

    settings = load_settings(
        "h100",
        data_source="speeches",
        data_dir=DATA_DIR,
        vocab_size=args.vocab,
        eval_tokens=args.seq_len * 16,
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
    runs_ref, runs_our = args.repeats, max(args.repeats, 5)
    fed = through_feeder(FeedJob(paths.train_dir, args.seq_len, tokenizer.bos_id, 0), seed, args, runs_our)
    total = args.batches * tokens_per_batch
    ref_rate, our_rate, fed_rate = total / ref_seconds, total / our_seconds, total / fed["seconds"]
    print(f"reference (tiktoken on the fly, list scan):  {ref_rate / 1e6:8.2f} M tokens/s")
    print(f"harness pair_batches (token files):          {our_rate / 1e6:8.2f} M tokens/s")
    print(f"feeder -> shared memory -> other process:    {fed_rate / 1e6:8.2f} M tokens/s")
    print(f"speedup: {our_rate / ref_rate:.1f}x in-process, {fed_rate / ref_rate:.1f}x through the feeder")
    print(
        f"crop fraction (dropped / taken tokens): reference {ref_stats.dropped_tokens / runs_ref:,.0f} / "
        f"{ref_stats.taken_tokens / runs_ref:,.0f} = {ref_stats.crop_fraction:.4f}, harness "
        f"{our_stats.dropped_tokens / runs_our:,.0f} / {our_stats.taken_tokens / runs_our:,.0f} = "
        f"{our_stats.crop_fraction:.4f}"
    )
    same = fed["digest"] == digest(our_inputs)
    print(f"identical batches: {identical} (reference and harness), {same} (through the feeder)")
    step = fed["step"]
    in_process = packed_batches(
        paths.train_dir, args.batch_size, args.seq_len, tokenizer.bos_id, torch.device("cpu"), seed
    )
    paths_waits = {
        "in-process packed_batches (reference)": consumer_waits(in_process, args.batches, step),
        "feeder path": fed["waits"],
    }
    for name, waits in paths_waits.items():
        print(
            f"{name} with prefetch, consumer step {step * 1e3:.1f} ms (H100 pace): wait per batch "
            f"median {statistics.median(waits) * 1e6:.0f} us, max {max(waits) * 1e6:.0f} us "
            f"(after the first batch; {sum(waits) / (step * len(waits)) * 100:.2f}% of step time)"
        )


if __name__ == "__main__":
    main()
