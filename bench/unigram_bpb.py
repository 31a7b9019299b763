"""Validation bpb of a unigram model: the bar a trained baseline must clearly beat.

The unigram model predicts every token with its frequency in the training tokens (add-one
smoothing, so no token has probability zero), whatever the context. It is scored on the same
validation rows with the same rules as any train.py, through harness.evaluate.evaluate_bpb.

    python bench/unigram_bpb.py [--preset cpu]

Prepares the data for the preset first if needed (cheap when already prepared).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from harness.config import load_settings
from harness.data.tokens import open_token_dir
from harness.evaluate import evaluate_bpb
from harness.prepare import prepare


class Unigram(torch.nn.Module):
    """Logits that ignore the context: the log-probabilities of the token frequencies."""

    log_probs: torch.Tensor  # a buffer

    def __init__(self, counts: np.ndarray) -> None:
        super().__init__()
        smoothed = torch.from_numpy(counts.astype(np.float64)) + 1.0  # add-one smoothing
        self.register_buffer("log_probs", (smoothed / smoothed.sum()).log().float())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.log_probs.expand(*idx.shape, -1)


def unigram_bpb(preset: str) -> tuple[float, int]:
    """(validation bpb of the unigram model, number of training tokens counted)."""
    settings = load_settings(preset)
    paths = prepare(settings, progress=False)
    train_tokens = open_token_dir(paths.train_dir).tokens
    counts = np.bincount(np.asarray(train_tokens), minlength=settings.vocab_size)
    model = Unigram(counts)
    score = evaluate_bpb(model, paths.val_dir, torch.device("cpu"), settings.eval_batch_rows)
    return score, int(counts.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu", help="settings preset (default cpu)")
    args = parser.parse_args()
    score, tokens = unigram_bpb(args.preset)
    print(f"unigram val_bpb {score:.4f} (preset {args.preset}, {tokens:,} training tokens counted)")


if __name__ == "__main__":
    main()
