"""The run-to-run noise of val_bpb from repeated runs: a pooled sigma that one outlier cannot blow up,
and a best's value that one outlier cannot pin.

Pure functions of the measurements (no database): `pool(groups)` takes the val_bpb of each
commit's measuring runs (server/crud/noise.py says which runs those are) and returns sigma and
its degrees of freedom; `bounded_mean(values, sigma)` is the value of a best from its measuring
runs.

The classical pooled estimate, sqrt(sum of squared deviations from each commit's mean / sum of
(runs - 1)), rests on squares: one run far off (heavy-tailed noise: a node that throttled, a
loader that stalled) moves it without bound. On simulated Student-t noise with 3 degrees of
freedom one such run left it at 4 times the true sigma, and the rule then kept almost nothing
(docs/benchmarks.md, "Decisions"). So the estimate is winsorized:

- Within each commit, every pair of runs (a, b) gives d = (a - b) / sqrt(2), whose standard
  deviation is sigma whatever the commit's true value. Weighting each pair by 2 / n (n: the
  commit's runs), sum(weight * d^2) over a commit is its sum of squared deviations from its mean,
  so without winsorizing this is exactly the classical pooled estimate.
- A robust scale, s = median |d| / 0.6745 (sigma for Gaussian noise), bounds every |d| at
  WINSOR * s before squaring: a far run counts as a run WINSOR robust sigmas off, no more.
- With Gaussian noise hardly a pair is bounded (|d| > 8 sigma: about 1e-15), so the estimate
  equals the classical one there (tests/server/test_noise_pool.py checks both). With Student-t
  noise (3 degrees of freedom) it estimates the standard deviation at about 0.95 of its true
  value, where the classical one ranged from 0.84 to over 1.6 times it on the same samples.

Degrees of freedom: sum of (runs - 1) over the commits, as for the classical estimate. Commits
whose runs are all equal are not pooled (`pool`'s docstring says why).

A best's value is the mean of its few measuring runs (4 repeats by default), and a best keeps
whatever luck they had for as long as it stays the best. With heavy-tailed noise one repeat far
below the truth pins it there: nothing real is kept against it again (bench/decision_frontier.py
showed it on Student-t noise). So each run first counts at most BOUND pooled sigmas from the
runs' median (the pooled sigma rests on hundreds of runs, the median on the best's own). On
Gaussian noise a run seldom lies that far from the median of four, and the bound changes the
decisions no more than another draw of the noise does (docs/benchmarks.md, "Decisions", has
the figures with and without it).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

WINSOR = 8.0  # robust sigmas at which a pair's difference is bounded
BOUND = 3.0  # pooled sigmas from the median at which a best's run is bounded (bench/decision_frontier.py)
_MEDIAN_ABS_NORMAL = 0.6744897501960817  # median |Z| for a standard normal Z


@dataclass(frozen=True)
class Pooled:
    """sigma with its degrees of freedom; runs and commits (those with several runs) it rests on."""

    sigma: float
    df: int
    runs: int
    commits: int


def pool(groups: Sequence[Sequence[float]], fitted: int = 0) -> Pooled | None:
    """The winsorized pooled sigma of these commits' runs, or None before any commit has two.
    A commit whose runs are all equal is left out: each run has its own seed and data order, so
    such runs come from a model that ignores both (server/rules/judge.py refuses it), and counting them
    would shrink the sigma every other decision uses. `fitted`: parameters fitted on these runs
    besides their commits' means (the workers' offsets, server/rules/worker_offsets.py), each taking a
    degree of freedom (None when none is left)."""
    several = [group for group in groups if len(group) >= 2 and len(set(group)) > 1]
    if not several:
        return None
    pairs = [
        (abs(a - b) / math.sqrt(2), 2 / len(group))
        for group in several
        for a, b in itertools.combinations(group, 2)
    ]
    # No bound when most pairs are equal (runs that repeat exactly): their scale says nothing.
    bound = WINSOR * statistics.median(d for d, _ in pairs) / _MEDIAN_ABS_NORMAL or math.inf
    sum_sq = sum(weight * min(d, bound) ** 2 for d, weight in pairs)
    df = sum(len(group) - 1 for group in several) - fitted
    if df < 1:
        return None
    return Pooled(math.sqrt(sum_sq / df), df, sum(len(group) for group in several), len(several))


def bounded_mean(values: Sequence[float], sigma: float | None) -> float:
    """The mean of `values`, each bounded at BOUND * sigma from their median (the plain mean
    without a noise estimate)."""
    if sigma is None:
        return statistics.fmean(values)
    middle, bound = statistics.median(values), BOUND * sigma
    return statistics.fmean(min(max(v, middle - bound), middle + bound) for v in values)
