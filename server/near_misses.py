"""Near misses: changes measured and not kept that may still be better than what they were
measured against, as a pure function of their judgements (no database, no git). They are the
candidates to combine: several small effects that each missed the bar may add up to a keep.

An experiment is a near miss when
- it was reverted (not kept, and not re-applied elsewhere: `rebased` and `stale` ones are not)
  after at least one valid run on the project's platform and harness, so that it has an effect
  against its reference (the best it was judged on, or its base once the best had moved on);
- and it is within the noise of that reference or better: the lower end of its effect's
  interval, effect - k * se, is below zero (k = `sigmas`, 1 by default). In words: it may be
  better than its reference, by the noise the server measured.

The effect is the one of its latest judgement, against its own reference, even if the best has
moved on since: the change is a diff, and what it did to its base is what it may do again on
top of the current best (`applies_to_best` says whether its diff still applies there). Under the
greedy rule a decision has no standard error; the pooled noise of the platform gives one
(sigma * sqrt(1/runs + 1/reference runs)), and without a noise estimate nothing is a near miss.

They are ranked most promising first: by the upper end of the same interval, effect + k * se,
the least they are likely to be worth (a precise small gain before a noisy large one of the
same upper end: then the larger effect first), then the newest first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_SIGMAS = 1.0
MAX_SIGMAS = 3.0


@dataclass(frozen=True)
class Measured:
    """A reverted experiment's latest judgement."""

    experiment_id: int
    effect: float  # its mean minus its reference's mean (negative is better)
    se: float | None  # None under the greedy rule
    runs: int
    reference_runs: int


@dataclass(frozen=True)
class NearMiss:
    experiment_id: int
    effect: float
    se: float
    pooled_se: bool  # se from the pooled noise (its decision stated none)
    lower: float  # effect - k * se: below zero
    upper: float  # effect + k * se: the ranking key


def near_misses(measured: Iterable[Measured], sigmas: float, noise_sigma: float | None) -> list[NearMiss]:
    """The near misses among `measured`, most promising first (`noise_sigma`: the pooled noise of
    the platform, for judgements without a standard error)."""
    assert 0 < sigmas <= MAX_SIGMAS
    found = []
    for m in measured:
        se, pooled = m.se, False
        if se is None and noise_sigma is not None and m.runs > 0 and m.reference_runs > 0:
            se, pooled = noise_sigma * math.sqrt(1 / m.runs + 1 / m.reference_runs), True
        if se is None or not math.isfinite(m.effect):
            continue
        lower, upper = m.effect - sigmas * se, m.effect + sigmas * se
        if lower < 0:
            found.append(NearMiss(m.experiment_id, m.effect, se, pooled, lower, upper))
    found.sort(key=lambda n: (n.upper, n.effect, -n.experiment_id))
    return found
