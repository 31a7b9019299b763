"""Decisions that hold on a fleet of GPUs with speed spread and drift: pure rules, evaluated by
bench/research_night.py before any of them moves into the server.

At a fixed time budget a slower GPU trains fewer tokens, so every run it makes reads worse by its
offset, and a candidate whose first run lands on a fast GPU looks better than it is; a fleet that
drifts (drivers, neighbours, heat) moves every run, so a best measured hours ago no longer
compares like with like. The rules:

- `worker_offsets`: each worker's offset at any moment, from the runs it made of known code (the
  measuring runs: the baseline's, the best's repeats). Model: value = level[commit] +
  offset[worker](t) + noise, with offset[worker](t) a kernel-weighted mean of that worker's
  residuals (value - level) around t, each run weighted 2^(-|t - t_run| / half-life) (equal
  weights with half-life 0: a constant offset), shrunk towards 0 as if `shrink` more runs had
  read exactly the level; levels and offsets are fitted by backfitting (each in turn the
  weighted mean of what the other leaves). A commit measured at several times (the best's
  repeats, all night) ties the times together, so the offsets carry the fleet's drift as well as
  each GPU's. Without a fixed `shrink` it is empirical Bayes (`_shrink`).
- `corrected`: a run's value less its worker's offset at its time: like compared with like,
  whichever worker ran it and when.
- `recent`: a best's value from its runs of the last hours only.
- `windows`: the noise pooled within windows of that length, so that drift left over between a
  best's runs across the night is not counted as run-to-run noise.
- `slowed`: a run far worse than its reference was slowed, and is run again instead of counted.
- `best_out_of_limits`: a control chart on the best's repeats: a repeat further than `limit`
  sigmas (of a difference between one run and the mean of n) from the best's value says the
  best's evidence no longer holds (the fleet drifted, or the evidence was luck).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from server.rules.worker_offsets import Measured


@dataclass(frozen=True)
class Corrections:
    """Which rules a server applies on top of today's (all off: today's server)."""

    offsets: bool = False  # correct every run by its worker's estimated offset at its time
    shrink: float | None = None  # runs' worth of belief that an offset is 0 (None: empirical Bayes)
    half_life_h: float = 0.0  # kernel of the offsets over time (0: one offset per worker)
    calibrate_every: int = 0  # each worker runs the best first, then once every this many runs
    stale_hours: float = 0.0  # a best's value rests on its runs of the last this many hours (0: all)
    control: float = 0.0  # control-chart limit on the best's repeats, in sigmas (0: none)
    # A reverted change is a near miss, which agents propose again on a later best, while its
    # t = effect / se is below this (0: measured better, server/rules/near_misses.py today).
    near_miss_t: float = 0.0
    rerun_slow: float = 0.0  # a run this many sigmas worse than its reference is run again (0: never)


def recent(runs: Sequence[Measured], now: float, hours: float, keep: int) -> list[Measured]:
    """The runs of the last `hours` before `now`, and at least the `keep` newest (all with hours 0):
    a best's value from evidence that has not aged."""
    if not hours:
        return list(runs)
    newest = sorted(runs, key=lambda run: run.time)
    fresh = [run for run in newest if now - run.time <= hours * 3600]
    return fresh if len(fresh) >= keep else newest[-keep:]


def windows(runs: Sequence[Measured], hours: float) -> list[list[Measured]]:
    """A commit's runs cut into consecutive windows of `hours` (one window with hours 0)."""
    if not hours:
        return [list(runs)]
    cut: dict[int, list[Measured]] = defaultdict(list)
    for run in runs:
        cut[int(run.time // (hours * 3600))].append(run)
    return [cut[k] for k in sorted(cut)]


def slowed(value: float, reference: float | None, sigma: float | None, limit: float) -> bool:
    """Whether a run reads more than `limit` pooled sigmas worse than its reference (the best's value
    for a run of the best, the base's for a candidate): on a fleet whose runs are sometimes slowed
    (a busy host: fewer tokens in the budget, only ever worse), such a run says more about its
    host than about its train.py, and is run again rather than counted."""
    if not limit or reference is None or sigma is None:
        return False
    return value - reference > limit * sigma


def best_out_of_limits(history: Sequence[float], run: float, sigma: float, limit: float) -> bool:
    """Whether a new run of the best lies outside `limit` sigmas of the best's value (the mean of
    its n earlier runs): |run - mean| > limit * sigma * sqrt(1 + 1/n)."""
    if not history:
        return False
    n = len(history)
    return abs(run - statistics.fmean(history)) > limit * sigma * math.sqrt(1 + 1 / n)
