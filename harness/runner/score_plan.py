"""Which validation rows each model process is shown, in which order and batches.

Every batch, in both processes, has exactly `batch_rows` rows, so a model cannot tell the eval
from the probe, or a repeat from a first showing, by shape. The order is drawn from a fresh OS
random seed on every run.

* The eval process sees every row once, in a random order, and then some again: `batch_rows` or
  more rows from the first quarter of the order are shown a second time among the rows of the
  last quarter, in other batches. Only the first showing counts for the score.
* The probe process sees one batch of variants: `batch_rows` rows, each cut at a random position
  and continued with real text from a row that is not probed, so the probe batch holds no later
  token of any probed row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Probe:
    row: int  # the evaluation row it is a variant of
    cut: int  # positions [0, cut) keep the row's tokens; from `cut` on, another row's text
    tokens: np.ndarray  # [T]


def plan_eval(num_rows: int, batch_rows: int, rng: np.random.Generator) -> np.ndarray:
    """Row indices in the order the eval process scores them; a multiple of `batch_rows` long.

    Each row appears once, in a random order, plus one batch more of repeats: rows from the first
    quarter (at least one batch) shown again among the last quarter, after every batch that holds
    a first showing of them.
    """
    order = rng.permutation(num_rows)
    batches = -(-num_rows // batch_rows) + 1
    extra = batches * batch_rows - num_rows
    # The first quarter, in whole batches; with fewer rows than a batch, all of them.
    head = batch_rows * max(1, num_rows // 4 // batch_rows) if num_rows >= batch_rows else num_rows
    repeats = rng.choice(order[:head], size=extra, replace=extra > head)
    late_start = max(head, num_rows - head)
    late = rng.permutation(np.concatenate([order[late_start:], repeats]))
    return np.concatenate([order[:late_start], late])


def plan_probes(inputs: np.ndarray, count: int, rng: np.random.Generator) -> list[Probe]:
    """`count` variants of random rows (distinct while there are enough), each with a random cut
    and the text after it from a donor row that is not probed. For degenerate data (no text that
    differs at the cut) the variants found are repeated to fill the batch, or none are returned."""
    rows, seq_len = inputs.shape
    if rows < 2 or seq_len < 2:
        return []
    probed = min(count, rows - 1)  # leave at least one donor
    chosen = rng.choice(rows, size=probed, replace=False)
    donors = np.setdiff1d(np.arange(rows), chosen)
    picks = [int(row) for row in chosen] + [int(row) for row in rng.choice(chosen, size=count - probed)]
    probes = []
    for row in picks:
        for _ in range(8):  # find a donor and cut where the text differs right at the cut
            cut = int(rng.integers(1, seq_len))
            donor = int(rng.choice(donors))
            suffix = inputs[donor, 1 : 1 + seq_len - cut]  # skip the donor's BOS
            if suffix[0] != inputs[row, cut]:
                tokens = inputs[row].copy()
                tokens[cut:] = suffix
                probes.append(Probe(row=row, cut=cut, tokens=tokens))
                break
    return [probes[i % len(probes)] for i in range(count)] if probes else []
