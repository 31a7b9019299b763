"""Each worker's offset over time, from its runs of known code: like compared with like on a fleet.

At a fixed time budget a slower GPU trains fewer tokens, so every run it makes reads worse by its
offset (a GPU 2 % slow reads about 0.002 val_bpb worse on `h100`), and a fleet drifts (drivers,
neighbours, heat). docs/research_night.md shows what that costs the rule and what this restores.

The model, fitted on the measuring runs only (the baseline's, the best's repeats: runs not chosen
for being good), value = level[commit] + offset[worker](t) + noise. offset[worker](t) is a
kernel-weighted mean of that worker's residuals (value - level) around t, each run weighted
2^(-|t - t_run| / half-life) (half-life 0: one constant offset per worker), shrunk towards 0 as if
`shrink` more runs had read exactly the level (empirical Bayes by default: `_shrink`), and the
offsets are centred on 0 over all runs; levels and offsets are fitted by backfitting (each in turn
the weighted mean of what the other leaves). A commit measured at several times (the best's
repeats) ties the times together, so the offsets carry the fleet's drift as well as each GPU's.
Pure functions of the runs: no database.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Measured:
    """A run's value, the worker that made it and when (seconds)."""

    value: float
    worker: int
    time: float


@dataclass(frozen=True)
class Offsets:
    """Each worker's residuals (value - level of its commit) at their times; `at` smooths them."""

    times: dict[int, np.ndarray] = field(default_factory=dict)
    residuals: dict[int, np.ndarray] = field(default_factory=dict)
    shrink: float = 0.0
    half_life_s: float = 0.0
    centre: float = 0.0

    def at(self, worker: int, time: float) -> float:
        """The worker's offset at `time`: its residuals' kernel-weighted mean, shrunk; 0 unknown."""
        if worker not in self.times:
            return 0.0
        weights = _kernel(self.times[worker] - time, self.half_life_s)
        return float(weights @ self.residuals[worker] / (weights.sum() + self.shrink)) - self.centre


NO_OFFSETS = Offsets()


def _kernel(dt: np.ndarray, half_life_s: float) -> np.ndarray:
    return np.exp2(-np.abs(dt) / half_life_s) if half_life_s else np.ones_like(dt)


def corrected(runs: Sequence[Measured], offsets: Offsets) -> list[float]:
    """The runs' values, each less its worker's offset at its time."""
    return [run.value - offsets.at(run.worker, run.time) for run in runs]


def worker_offsets(
    groups: Sequence[Sequence[Measured]], half_life_h: float, shrink: float | None = None
) -> Offsets:
    """The workers' offsets over time from the commits' measuring runs (`groups`: one commit's
    runs each), by backfitting (module docstring)."""
    runs = [(g, run) for g, group in enumerate(groups) for run in group]
    workers = sorted({run.worker for _, run in runs})
    if len(workers) < 2:
        return NO_OFFSETS
    half_life = half_life_h * 3600
    shrink = shrink if shrink is not None else _shrink(runs, workers)
    index = {w: [i for i, (_, run) in enumerate(runs) if run.worker == w] for w in workers}
    times = {w: np.array([runs[i][1].time for i in index[w]]) for w in workers}
    values = np.array([run.value for _, run in runs])
    commit = np.array([g for g, _ in runs])
    kernels = {w: _kernel(times[w][:, None] - times[w][None, :], half_life) for w in workers}
    offset = np.zeros(len(runs))
    residual = values.copy()
    for _ in range(30):
        levels = np.bincount(commit, values - offset) / np.bincount(commit)
        residual = values - levels[commit]
        new = np.empty(len(runs))
        for w in workers:
            k = kernels[w]
            new[index[w]] = k @ residual[index[w]] / (k.sum(axis=1) + shrink)
        new -= new.mean()
        change = float(np.abs(new - offset).max())
        offset = new
        if change < 1e-10:
            break
    return Offsets(
        times=times,
        residuals={w: residual[index[w]] for w in workers},
        shrink=shrink,
        half_life_s=half_life,
        centre=_centre(times, {w: residual[index[w]] for w in workers}, kernels, shrink),
    )


def _centre(
    times: dict[int, np.ndarray],
    residuals: dict[int, np.ndarray],
    kernels: dict[int, np.ndarray],
    shrink: float,
) -> float:
    """The mean raw offset over all runs, which `Offsets.at` takes off (offsets centre on 0)."""
    raw = [k @ residuals[w] / (k.sum(axis=1) + shrink) for w, k in kernels.items()]
    return float(np.concatenate(raw).mean())


def _shrink(runs: Sequence[tuple[int, Measured]], workers: Sequence[int]) -> float:
    """Empirical Bayes: s^2 / tau^2, with s^2 the runs' variance around level + constant offset
    and tau^2 the spread of the unshrunk constant offsets less their estimation error (the mean
    of s^2 / n over the workers): a worker keeps n / (n + s^2 / tau^2) of its offset, all of it
    when the GPUs differ much more than a run's noise, little when they hardly differ."""
    values = np.array([run.value for _, run in runs])
    commit = np.array([g for g, _ in runs])
    worker = np.searchsorted(np.array(workers), np.array([run.worker for _, run in runs]))
    offsets = np.zeros(len(workers))
    for _ in range(50):
        levels = np.bincount(commit, values - offsets[worker]) / np.bincount(commit)
        fitted = np.bincount(worker, values - levels[commit], len(workers)) / np.bincount(worker)
        fitted -= fitted.mean()
        change = float(np.abs(fitted - offsets).max())
        offsets = fitted
        if change < 1e-10:
            break
    dof = len(runs) - len(set(commit.tolist())) - len(workers) + 1
    if dof <= 0:
        return math.inf
    s2 = float(((values - levels[commit] - offsets[worker]) ** 2).sum()) / dof
    if s2 <= 0.0:
        return 0.0  # exact runs: the offsets are what they read
    error = float(np.mean(s2 / np.bincount(worker)))
    tau2 = max(float(offsets.var()) - error, s2 / 100)
    return s2 / tau2
