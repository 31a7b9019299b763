"""Training rows from prepared token files: documents in a seeded order, packed best-fit.

This is the packing half of the training loader, with no torch: the trusted feeder
(harness.runner.feeder) runs it outside the train sandbox, and the in-process loader
(harness.loader) on top of it. Documents are visited in a fresh seeded permutation each epoch;
each row is exactly seq_len + 1 tokens, starts with BOS and holds whole documents placed best-fit
(harness.data.packing).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from harness.data.errors import DataError
from harness.data.packing import BUFFER_DOCS, PackStats, best_fit_batches
from harness.data.tokens import TokenFile, open_token_dir

SPAN_CHUNK = 4096


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


def open_training_tokens(train_dir: Path, bos_id: int, max_tokens: int) -> TokenFile:
    """The prepared token folder, checked against the tokenizer's BOS id and TRAIN_TOKENS_MAX."""
    token_file = open_token_dir(Path(train_dir))
    if token_file.bos_id != bos_id:
        raise DataError(
            f"{train_dir}: tokens were prepared with BOS id {token_file.bos_id}, not {bos_id}; "
            "the tokenizer changed, run `autoresearch prepare` again"
        )
    usable_docs(token_file, max_tokens)
    return token_file


def row_batches(
    token_file: TokenFile,
    batch_size: int,
    seq_len: int,
    seed: int,
    max_tokens: int = 0,
    stats: PackStats | None = None,
) -> Iterator[np.ndarray]:
    """Endless [batch_size, seq_len + 1] arrays of tokens (the token file's dtype), one per batch:
    row[:-1] are the inputs and row[1:] the targets."""
    if batch_size < 1 or seq_len < 1:
        raise ValueError(f"batch_size ({batch_size}) and seq_len ({seq_len}) must be positive")
    spans = epoch_spans(token_file.offsets, usable_docs(token_file, max_tokens), seed)
    return best_fit_batches(
        token_file.read_into, token_file.tokens.dtype, spans, seq_len + 1, batch_size, BUFFER_DOCS, stats
    )
