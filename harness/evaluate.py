"""evaluate_bpb: validation bits per byte, computed by the harness from the model's logits.

The model only produces logits; the loss is computed here, never taken from model code. For the
fixed evaluation rows: bpb = (sum of per-target cross-entropy in nats) / (ln 2 * sum of target
byte lengths), where targets that are special tokens (byte length 0, e.g. BOS) are left out of
both sums. Memory stays bounded: the logits are processed a chunk of rows at a time.

Precision: per row, log-sum-exp = max + log1p(sum of exp(logit - max) over all but the max).
The max and the target's logit are exact; the other terms are below 1 and summed on their own,
so log1p of their sum is accurate to float32 rounding relative to itself, even for a model that
is nearly sure (where 1 + rest would round the rest away). The pieces are combined and summed
in float64; float64 logits stay float64 throughout. It costs a little more than torch's float32
cross-entropy and far less than a full float64 one (docs/harness.md has the figures), and agrees
with a float64 computation to ~1e-9 relative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from harness.data.errors import DataError

# Logit elements per chunk of log-softmax work (128 MiB of float32).
CHUNK_ELEMENTS = 1 << 25


# A validation document is judged against the preset's floor (DOC_BPB_FLOOR) only once this many
# bytes of it are scored: a short line ("To the Congress of the United States:") can be nearly
# certain to any trained model.
DOC_FLOOR_MIN_BYTES = 128


@dataclass(frozen=True)
class EvalRows:
    """The evaluation rows, [N, T] each: inputs, targets, byte length of each target, and the
    document of each target, numbered 0..documents-1 in these rows (its pool document's order)."""

    inputs: torch.Tensor
    targets: torch.Tensor
    target_bytes: torch.Tensor
    target_docs: torch.Tensor

    @property
    def num_rows(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def documents(self) -> int:
        return int(self.target_docs.max()) + 1 if self.target_docs.numel() else 0


def load_eval_rows(val_dir: Path) -> EvalRows:
    """Load val/inputs.npy, targets.npy, target_bytes.npy and target_docs.npy as int64 tensors."""
    val_dir = Path(val_dir)
    arrays = []
    for name in ("inputs.npy", "targets.npy", "target_bytes.npy", "target_docs.npy"):
        try:
            arrays.append(np.load(val_dir / name).astype(np.int64))
        except (OSError, ValueError) as exc:
            raise DataError(f"{val_dir / name}: unreadable ({exc}); run `autoresearch prepare`") from exc
    inputs, targets, target_bytes, target_docs = arrays
    if not (inputs.ndim == 2 and inputs.shape == targets.shape == target_bytes.shape == target_docs.shape):
        raise DataError(
            f"{val_dir}: evaluation arrays disagree in shape ({', '.join(str(a.shape) for a in arrays)}); "
            "run `autoresearch prepare` again"
        )
    dense = np.unique(target_docs, return_inverse=True)[1].reshape(target_docs.shape)
    tensors = [torch.from_numpy(array) for array in (inputs, targets, target_bytes, dense)]
    return EvalRows(*tensors)


def documents_below(
    doc_nats: np.ndarray, doc_bytes: np.ndarray, floor: float
) -> list[tuple[int, float, int]]:
    """(document, bits per byte, bytes) of each document with at least DOC_FLOOR_MIN_BYTES scored
    whose bits per byte lie below `floor`, lowest first: text no trained model of the preset
    predicts that well, so the model knew it (the scorer's integrity check `known_text`)."""
    judged = np.flatnonzero(doc_bytes >= DOC_FLOOR_MIN_BYTES)
    rates = doc_nats[judged] / (math.log(2) * doc_bytes[judged])
    below = judged[rates < floor]
    found = [
        (int(doc), float(doc_nats[doc] / (math.log(2) * doc_bytes[doc])), int(doc_bytes[doc]))
        for doc in below
    ]
    return sorted(found, key=lambda item: item[1])


def token_nats(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of every target in nats, float64 [B, T] on the logits' device.

    `logits` [B, T, V] (any float dtype, any device), `targets` [B, T]. A pure function of its
    inputs: the value at one position depends only on that position's logits and target, so the
    same logits give the same nats whatever else is in the batch. Raises ValueError on shapes that
    disagree or targets outside the vocabulary.
    """
    if logits.ndim != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits {tuple(logits.shape)} must be [B, T, V] with targets [B, T], "
            f"got targets {tuple(targets.shape)}"
        )
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    vocab = logits.shape[-1]
    targets = targets.to(logits.device, torch.int64)
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab):
        raise ValueError(f"targets must lie in [0, {vocab}), the logits' vocabulary")
    flat_logits = logits.reshape(-1, vocab)
    flat_targets = targets.reshape(-1)
    nats = torch.empty(flat_targets.numel(), dtype=torch.float64, device=logits.device)
    chunk = max(1, CHUNK_ELEMENTS // max(1, vocab))
    for first in range(0, flat_targets.numel(), chunk):
        part = flat_logits[first : first + chunk]
        if part.dtype != torch.float64:
            part = part.float()
        peak, top = part.max(dim=1, keepdim=True)
        terms = part - peak  # a new tensor: the caller's logits are never modified
        terms.exp_()
        terms.scatter_(1, top, 0.0)  # the max's own term, exactly 1, goes in through log1p
        rest = terms.sum(dim=1)
        picked = part.gather(1, flat_targets[first : first + chunk, None]).squeeze(1)
        nats[first : first + chunk] = peak.squeeze(1).double() + rest.double().log1p() - picked.double()
    return nats.view(targets.shape)


def sum_nats_and_bytes(
    logits: torch.Tensor, targets: torch.Tensor, target_bytes: torch.Tensor
) -> tuple[float, int]:
    """(sum of cross-entropy in nats, sum of bytes) over the targets with a nonzero byte length.

    `logits` [B, T, V] (any float dtype, any device), `targets` and `target_bytes` [B, T]. A pure
    function of its inputs; raises ValueError on shapes that disagree, targets outside the
    vocabulary, or logits that make a loss non-finite (NaN or +inf anywhere in a scored row,
    -inf at a target).
    """
    if target_bytes.shape != targets.shape:
        raise ValueError(
            f"target_bytes {tuple(target_bytes.shape)} must have the shape of targets {tuple(targets.shape)}"
        )
    nats = token_nats(logits, targets)
    target_bytes = target_bytes.to(logits.device, torch.int64)
    if target_bytes.numel() and int(target_bytes.min()) < 0:
        raise ValueError("target_bytes must be non-negative")
    counted = nats[target_bytes > 0]
    if not bool(torch.isfinite(counted).all()):
        raise ValueError("logits contain NaN or infinity")
    return float(counted.sum()), int(target_bytes.sum())


def bpb(total_nats: float, total_bytes: int) -> float:
    """Bits per byte from summed nats and bytes."""
    if total_bytes <= 0:
        raise ValueError("no target bytes to score")
    return total_nats / (math.log(2) * total_bytes)


@torch.no_grad()
def evaluate_bpb(model: torch.nn.Module, val_dir: Path, device: torch.device, batch_rows: int) -> float:
    """Validation bpb of `model` (forward: idx [B, T] -> logits [B, T, V]) on the fixed rows."""
    rows = load_eval_rows(val_dir)
    was_training = model.training
    model.eval()
    total_nats = 0.0
    total_bytes = 0
    try:
        for first in range(0, rows.num_rows, batch_rows):
            chunk = slice(first, first + batch_rows)
            logits = model(rows.inputs[chunk].to(device))
            nats, nbytes = sum_nats_and_bytes(logits, rows.targets[chunk], rows.target_bytes[chunk])
            total_nats += nats
            total_bytes += nbytes
    finally:
        model.train(was_training)
    return bpb(total_nats, total_bytes)
