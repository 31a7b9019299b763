"""Near misses: changes measured and not kept that measured better than what they were measured
against, as a pure function of their judgements (no database, no git). They are the candidates to
combine: several small gains that each missed the bar may add up to a keep.

An experiment is a near miss when
- it was reverted (not kept, and not re-applied elsewhere: `rebased` and `stale` ones are not)
  after at least one valid run on the project's platform and harness, so that it has an effect
  against its reference (the best it was judged on, or its base once the best had moved on);
- and that effect is an improvement: effect < 0 (its mean val_bpb below its reference's). It was
  reverted because the gain did not reach significance. A change that measured worse is never
  one, however noisy: the evidence it gave points the other way.

The effect is the one of its latest judgement, against its own reference, even if the best has
moved on since: the change is a diff, and what it did to its base is what it may do again on
top of the current best (`applies_to_best` says whether its diff still applies there). Under the
greedy rule a decision has no standard error; the pooled noise of the platform gives one
(sigma * sqrt(1/runs + 1/reference runs)), and without a noise estimate nothing is a near miss
(its evidence cannot be stated).

They are ranked by their evidence, strongest first: by z = effect / se, the gain in standard
errors (a precise small gain before a noisy large one; z = -1.5 is a gain one run in about 15
shows by chance alone when there is none); at equal z the larger gain, then the newest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


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
    effect: float  # below zero
    se: float  # above zero
    pooled_se: bool  # se from the pooled noise (its decision stated none)
    z: float  # effect / se: the ranking key, below zero


def near_misses(measured: Iterable[Measured], noise_sigma: float | None) -> list[NearMiss]:
    """The near misses among `measured`, strongest evidence first (`noise_sigma`: the pooled noise
    of the platform, for judgements without a standard error)."""
    found = []
    for m in measured:
        se, pooled = m.se, False
        if se is None and noise_sigma is not None and m.runs > 0 and m.reference_runs > 0:
            se, pooled = noise_sigma * math.sqrt(1 / m.runs + 1 / m.reference_runs), True
        # An se of 0 states no noise, so no evidence to rank by (a noise-aware judgement with a
        # gain and no noise would have been a keep).
        if se is None or not se > 0 or not (math.isfinite(m.effect) and m.effect < 0):
            continue
        found.append(NearMiss(m.experiment_id, m.effect, se, pooled, m.effect / se))
    found.sort(key=lambda n: (n.z, n.effect, -n.experiment_id))
    return found
