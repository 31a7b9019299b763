"""Which validation rows each model process is shown, in which order and batches, and how much
the probe can catch.

Every batch, in both processes, has exactly `batch_rows` rows, so a model cannot tell the eval
from the probe, or a repeat from a first showing, by shape; but on a CPU the first batch of each
process holds HEAD_ROWS rows (the model knows its first batch anyway). What a model does before its
first answer is bounded by the startup and that batch's allowance alone (score_budget): the
smaller the first batch, the less training can hide there. Training after it is caught like any
between batches: the eval's head rows are shown again later. Comparisons across the two sizes are
judged apart (`shape`, harness.runner.scoring.agreement): a forward that depends on the batch's size is
`batch_variant`, not `non_causal`. Not on CUDA, where kernels are picked by shape.
The order is drawn from a fresh OS random seed on every run.

* The eval process sees every row once, in a random order, and then some again: `batch_rows` or
  more rows from the first quarter of the order are shown a second time among the rows of the
  last quarter, in other batches. Only the first showing counts for the score.
* The probe process sees batches of variants: evaluation rows cut at random positions and
  continued with training text taken from a random place in the training tokens (mid-document,
  with a BOS wherever a document starts, as in real rows). Each batch holds distinct rows, and a
  row probed more than once is cut further on in each later batch, so that when a variant is
  answered the process has never been shown the row's own token at its cut.
* Some rows are shown whole (a cut at T) as their last variant: the only variant that compares a
  row's last position, which no later token can give away, so that only state could change it
  (an answer cached from rows scored before). `whole_rows` are enough to catch a model that does
  so in WHOLE_SHARE of the rows with probability PROBE_POWER.

Power. A variant tests one position for a lookahead: the last one before its cut, where the next
token differs from the row's (the positions before it see the same next tokens in both). After
the cut the prefixes differ from every scored row, so no design tests more than one position per
variant row. A model that reads ahead at a share f of the N scored positions (whichever it
chooses: the plan is drawn after its weights are fixed) escapes k distinct tested positions with
probability C(N - fN, k) / C(N, k), about (1 - f)^k; `probe_batches` sizes the probe so that
this is at most 1 - PROBE_POWER.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The least probability that one run catches a lookahead on the preset's share of positions
# (`probe_share`, harness.config).
PROBE_POWER = 0.95
# The share of rows whose last position a model may answer from state and still be caught with
# PROBE_POWER (docs/runner.md, "The probe's power").
WHOLE_SHARE = 0.1
HEAD_ROWS = 1  # rows of each model process's first batch, on a CPU
DONOR_TRIES = 8  # redraws of a variant's donor text when its first token equals the row's


@dataclass(frozen=True)
class Probe:
    row: int  # the evaluation row it is a variant of
    cut: int  # positions [0, cut) keep the row's tokens; from `cut` on, training text
    tokens: np.ndarray  # [T]
    tests: bool  # its token at `cut` differs from the row's: position cut - 1 is tested


def plan_eval(num_rows: int, batch_rows: int, rng: np.random.Generator, head_rows: int = 0) -> np.ndarray:
    """Row indices in the order the eval process scores them: `head_rows` rows first (the first
    batch, when there is a head), then a multiple of `batch_rows`.

    Each row appears once, in a random order, plus one batch more of repeats: rows from the first
    quarter (at least one batch) shown again among the last quarter, after every batch that holds
    a first showing of them. Head rows are shown again where the order would show them anyway.
    """
    order = rng.permutation(num_rows)
    batches = -(-num_rows // batch_rows) + 1
    extra = batches * batch_rows - num_rows
    # The first quarter, in whole batches; with fewer rows than a batch, all of them.
    head = batch_rows * max(1, num_rows // 4 // batch_rows) if num_rows >= batch_rows else num_rows
    repeats = rng.choice(order[:head], size=extra, replace=extra > head)
    late_start = max(head, num_rows - head)
    late = rng.permutation(np.concatenate([order[late_start:], repeats]))
    first = rng.choice(num_rows, size=head_rows, replace=False) if head_rows else order[:0]
    return np.concatenate([first, order[:late_start], late])


def batches_of(order: np.ndarray, batch_rows: int, head_rows: int = 0) -> list[np.ndarray]:
    """`order` in the batches a model process is given: the head (when there is one), then full
    batches."""
    rest = order[head_rows:]
    full = [rest[start : start + batch_rows] for start in range(0, len(rest), batch_rows)]
    return ([order[:head_rows]] if head_rows else []) + full


def detection_power(tested: int, positions: int, share: float) -> float:
    """The probability that `tested` distinct positions out of `positions` include at least one of
    a lookahead's floor(share x positions) positions, placed independently of them:
    1 - C(positions - s, tested) / C(positions, tested), in log-gamma form."""
    cheated = math.floor(share * positions)
    if cheated <= 0 or tested <= 0:
        return 0.0
    if tested > positions - cheated:
        return 1.0
    log_miss = (
        math.lgamma(positions - cheated + 1)
        - math.lgamma(positions - cheated - tested + 1)
        - math.lgamma(positions + 1)
        + math.lgamma(positions - tested + 1)
    )
    return 1.0 - math.exp(log_miss)


def whole_rows(num_rows: int) -> int:
    """How many rows the probe shows whole: the fewest that include one of any WHOLE_SHARE of the
    rows with probability PROBE_POWER, or all of them where that share is less than one row."""
    for count in range(1, num_rows + 1):
        if detection_power(count, num_rows, WHOLE_SHARE) >= PROBE_POWER:
            return count
    return num_rows


def probe_batches(num_rows: int, seq_len: int, batch_rows: int, share: float) -> int:
    """The fewest probe batches whose positions catch a lookahead on `share` of the scored
    positions with probability PROBE_POWER, besides the rows shown whole (0 when `share` is 0: no
    probe)."""
    if share <= 0:
        return 0
    positions = num_rows * (seq_len - 1)  # a cut at 1..T-1 tests position cut - 1
    whole = whole_rows(num_rows)
    low, high = max(1, -(-whole // batch_rows)), -(-(positions + whole) // batch_rows)
    while low < high:
        middle = (low + high) // 2
        if detection_power(middle * batch_rows - whole, positions, share) >= PROBE_POWER:
            high = middle
        else:
            low = middle + 1
    return low


def plan_probes(
    inputs: np.ndarray,
    batch_rows: int,
    batches: int,
    donor: np.ndarray,
    rng: np.random.Generator,
    head_rows: int = 0,
) -> list[list[Probe]]:
    """`batches` batches of `batch_rows` variants of distinct rows each, after a first batch of
    `head_rows` when there is a head. Each row's cuts are distinct and grow from batch to batch;
    the text after a cut is `donor` text (training tokens) from a random place, redrawn while its
    first token equals the row's at the cut. `whole_rows` of the rows probed (or all of them, if
    fewer) are shown whole as their last variant."""
    rows, seq_len = inputs.shape
    if rows < batch_rows or batches + bool(head_rows) > seq_len or len(donor) < seq_len:
        raise ValueError(
            f"cannot plan {batches} probe batches of {batch_rows} distinct rows from {rows} rows of "
            f"{seq_len} tokens and {len(donor)} donor tokens"
        )
    sizes = ([head_rows] if head_rows else []) + [batch_rows] * batches
    chosen = [rng.choice(rows, size=size, replace=False) for size in sizes]
    counts = np.bincount(np.concatenate(chosen), minlength=rows)
    # Each row's cuts, smallest first: a later variant of a row holds the row's tokens up to its own
    # cut, which includes the token at every earlier cut, so it must come after them.
    probed = np.flatnonzero(counts)
    whole = set(rng.choice(probed, size=min(whole_rows(rows), len(probed)), replace=False).tolist())
    cuts = {
        row: sorted(rng.choice(np.arange(1, seq_len), size=count - (row in whole), replace=False).tolist())
        + [seq_len] * (row in whole)
        for row, count in zip(probed.tolist(), counts[probed].tolist(), strict=True)
    }
    plan = []
    for batch in chosen:
        probes = []
        for row in batch.tolist():
            cut = cuts[row].pop(0)
            if cut == seq_len:  # whole: compares every position, the last one too
                probes.append(Probe(row=row, cut=cut, tokens=inputs[row].copy(), tests=False))
                continue
            for _ in range(DONOR_TRIES):
                start = int(rng.integers(0, len(donor) - (seq_len - cut) + 1))
                if donor[start] != inputs[row, cut]:
                    break
            tokens = np.concatenate([inputs[row, :cut], donor[start : start + seq_len - cut]])
            probes.append(Probe(row=row, cut=cut, tokens=tokens, tests=bool(tokens[cut] != inputs[row, cut])))
        plan.append(probes)
    return plan


def plan_power(plan: list[list[Probe]], num_rows: int, seq_len: int, share: float) -> float:
    """The plan's detection power at `share` (detection_power of its tested positions)."""
    tested = sum(probe.tests for batch in plan for probe in batch)
    return detection_power(tested, num_rows * (seq_len - 1), share)
