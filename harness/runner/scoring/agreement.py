"""Whether the model's predictions are a function of its weights and each row's prefix alone.

The score of a row may depend only on the trained weights and, at each position, on that row's
tokens up to it: not on later tokens, other rows of the batch, rows scored before, or time. The
scorer therefore scores some prefixes twice and compares the cross-entropy of the scored target
at each position (nats: a log-probability, which is what the score is made of):

* `repeat`: rows scored early in the evaluation and again late, in other batches;
* `probe`: rows scored again by a fresh process, each with its tokens from a random cut on
  replaced by other text, at the positions before the cut's last one;
* `cut`: the same, at the last position before the cut, where the next token differs.

Honest models agree exactly on CPU, in float32 and with bf16 autocast, when both scorings ran in
batches of the same row count (the same kernels run; docs/runner.md has the measurements). On a
CPU the first batch of each process holds one row (harness.runner.scoring.score_plan.HEAD_ROWS), and bf16
kernels on a CPU can round a row differently alone and in a full batch; so a comparison of a row
scored in a batch of one size with one scored in a batch of the other goes to its own group,
`shape`. Disagreement there, and nowhere else, is `batch_variant`: the run is not scored, but it is
no integrity event (an honest model whose forward depends on the batch size ends there; a model
that changed after its first answer does too, and gains nothing). Two rules, on the
differences d = nats(first scoring) - nats(second scoring):

1. |d| <= TOLERANCE_NATS at every position: a model that reads ahead or learns moves some
   prediction by more than numerical noise;
2. |mean d| <= LEAN_FRACTION x TOLERANCE_NATS within each group: a model that keeps every
   deviation under the tolerance (a lookahead or a learned adapter mixed in and clipped) still
   leans the same way over many positions, and it can gain at most this much per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Largest |d| (nats) accepted at one position, by device type. On CPU honest models measured
# exactly 0 (docs/runner.md); 1e-4 is about 100 float32 roundings of a logit of 15. On CUDA
# (not measured: no GPU was available) deterministic kernels agree exactly as well; 1e-3 admits
# float32 atomics in a forward (about 1e-5) but not bf16 ones, whose roundings are ~1e-2.
TOLERANCE_NATS = {"cpu": 1e-4, "cuda": 1e-3}
# Honest groups lean exactly 0 where measured, and noise that does differ by a rounding leans
# both ways, so its mean shrinks with the positions compared: the lean limit can sit far below the
# tolerance (docs/runner.md, "Agreement").
LEAN_FRACTION = 1.0 / 32.0
GROUP_TEXT = {
    "repeat": "the same row, scored early and again late in the evaluation, got different predictions",
    "probe": "a fresh process scoring the same prefix got different predictions",
    "cut": "a fresh process scoring the same prefix with a different next token got different predictions",
    "shape": "the same prefix, scored in a batch of one row and in a full batch, got different predictions",
}
BATCH_VARIANT_FIX = (
    "a model's prediction for a row may not depend on how many rows its batch holds; on a CPU, score in "
    "float32 (bf16 kernels there round a row differently alone and in a batch): leave autocast to train()"
)
CAUSES = (
    "the score of a row may depend only on the trained weights and the row's own tokens up to each "
    "position: not on later tokens, on other rows, on rows scored before (learning or caching while "
    "scored), on time, or on randomness"
)


def tolerance_for(device: str) -> float:
    return TOLERANCE_NATS["cuda" if device.startswith("cuda") else "cpu"]


@dataclass
class Group:
    """Differences of one kind of comparison, with where the largest one is."""

    name: str
    parts: list[np.ndarray] = field(default_factory=list)
    worst: float = 0.0
    worst_at: tuple[int, int] = (0, 0)  # evaluation row, position

    def add(self, first: np.ndarray, second: np.ndarray, row: int, offset: int = 0) -> None:
        """Add the differences of one row's nats at positions offset, offset + 1, ..., scored twice."""
        deviation = np.asarray(first, dtype=np.float64) - np.asarray(second, dtype=np.float64)
        if deviation.size == 0:
            return
        self.parts.append(deviation)
        position = int(np.argmax(np.abs(deviation)))
        if abs(deviation[position]) > self.worst:
            self.worst = float(abs(deviation[position]))
            self.worst_at = (row, offset + position)

    @property
    def count(self) -> int:
        return sum(part.size for part in self.parts)

    def lean(self) -> float:
        """Mean signed difference over all positions (0 when empty)."""
        if not self.parts:
            return 0.0
        return float(np.concatenate(self.parts).mean())


def verdict(groups: list[Group], shape: Group, tolerance: float) -> tuple[str, str] | None:
    """(error class, message) for the first rule a group breaks, or None when all agree: the
    same-shape `groups` first (`non_causal`), then `shape` (`batch_variant`)."""
    if (broken := judge(groups, tolerance)) is not None:
        return "non_causal", f"non-causal model: {broken}; {CAUSES}"
    if (broken := judge([shape], tolerance)) is not None:
        return "batch_variant", f"batch-variant model: {broken}; {BATCH_VARIANT_FIX}"
    return None


def judge(groups: list[Group], tolerance: float) -> str | None:
    """What the first rule a group breaks shows, or None when all agree."""
    for group in groups:
        if group.worst > tolerance:
            row, position = group.worst_at
            return (
                f"{GROUP_TEXT[group.name]}: the log-probability of the target at position {position} of "
                f"evaluation row {row} differs by {group.worst:.3g} nats (tolerance {tolerance:g})"
            )
    for group in groups:
        lean, limit = group.lean(), LEAN_FRACTION * tolerance
        if abs(lean) > limit:
            return (
                f"{GROUP_TEXT[group.name]}: every position is within the tolerance (largest difference "
                f"{group.worst:.3g} nats, tolerance {tolerance:g}), but over {group.count} positions they "
                f"lean one way by {lean:.3g} nats on average (limit {limit:.3g})"
            )
    return None


def summary(groups: list[Group], tolerance: float) -> str:
    parts = [f"{g.name} {g.count} positions, max {g.worst:.3g}, lean {g.lean():.3g}" for g in groups]
    return (
        f"agreement (nats; tolerance {tolerance:g}, lean limit {LEAN_FRACTION * tolerance:.3g}): "
        + "; ".join(parts)
    )
