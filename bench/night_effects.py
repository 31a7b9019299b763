"""The true effects of agents' changes, fitted to published autoresearch histories.

    python -m bench.night_effects [--history h100|rtx5070 ...] [--particles 4000] [--starts 8]

An autoresearch history (results.tsv: one agent, one GPU, one run per experiment, keep when
val_bpb is below the best so far) is a sequence of measured values v_1, v_2, ... with the keeps.
Each is the true value of the best it was tried on, T, plus the change's true effect delta,
plus the run's noise: v = T + delta + e, e ~ N(0, sigma^2). The effects are a mixture
(`Effects`):

- a share `null` of changes does nothing (delta = 0);
- a share `harmful` makes val_bpb worse: delta = +Exp(mean `harm_mean`);
- a share `good` improves it: delta = -f(G) * Exp(mean `good_mean`), G = T_0 - T the lineage's
  true gain so far and f(G) = exp(-G / `depletion`): the easy wins come first (the H100
  history's first seven keeps gave 0.022 of its 0.028, the last fifteen 0.006);
- a share `fail` crashes or breaks training (val_bpb over 1.5 times the best's: weight tying at
  3.2 on the H100); a wasted run, never kept. Counted, not fitted.

The best's true value T is hidden: the loop kept it on one lucky run, so every later run looks
worse by that luck (the winner's curse). So the likelihood of the history is computed with T as
the hidden state of a particle filter: each particle holds a baseline T_0 ~ N(v_0, sigma^2) and
a T; at a discard it is weighted by the density of v - T under the mixture (a Gaussian for the
nulls, an exponentially modified Gaussian for either tail); at a keep likewise, and then T moves
by a delta drawn from its posterior given v. The log-likelihood is the sum of the logs of the
mean weights, with the particles resampled at every step; the six parameters (two shares, the
three scales, sigma) maximise it (Nelder-Mead from several starts, the filter's random numbers
fixed, so the objective is a deterministic function). `sigma` is that history's run-to-run
noise (autoresearch's fixed seed); bench/research_night.py draws its own.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
HISTORIES = {
    "h100": DATA / "autoresearch_h100_mar8.tsv",
    "rtx5070": DATA / "autoresearch_rtx5070.tsv",
}
BROKEN = 1.5  # a run over this many times the best's val_bpb broke training (weight tying: 3.3x)


@dataclass(frozen=True)
class History:
    """A history's baseline, then each experiment's value and whether it was kept (crashes and
    broken runs left out, counted in `fails`)."""

    baseline: float
    values: tuple[float, ...]
    kept: tuple[bool, ...]
    fails: int

    @property
    def gain(self) -> float:
        """baseline - final best, as measured."""
        return self.baseline - min(
            [self.baseline, *(v for v, k in zip(self.values, self.kept, strict=True) if k)]
        )


@dataclass(frozen=True)
class Effects:
    """The mixture of true effects (val_bpb; negative is better) and the history's noise."""

    null: float
    harmful: float
    good: float
    fail: float
    harm_mean: float
    good_mean: float
    depletion: float  # G at which an improvement's expected size falls by a factor e
    sigma: float
    log_likelihood: float = 0.0
    experiments: int = 0

    def scale(self, gain: float) -> float:
        """f(G) = exp(-G / depletion): an improvement's size at gain G relative to the first's."""
        return math.exp(-max(gain, 0.0) / self.depletion)

    def describe(self) -> str:
        return (
            f"null {self.null:.1%}, harmful {self.harmful:.1%} (mean +{self.harm_mean:.5f}), "
            f"good {self.good:.1%} (mean -{self.good_mean:.5f} x exp(-G / {self.depletion:.4f})), "
            f"fail {self.fail:.1%}; that history's run-to-run sigma {self.sigma:.5f} "
            f"({self.experiments} experiments, log-likelihood {self.log_likelihood:.1f})"
        )


def read_history(path: Path) -> History:
    """A results.tsv reduced to `val_bpb<TAB>status` rows (comment lines start with #; the first
    row is the baseline)."""
    rows = [
        line.split("\t")
        for line in path.read_text().splitlines()
        if line and not line.startswith("#") and not line.startswith("val_bpb")
    ]
    baseline = best = float(rows[0][0])
    values, kept, fails = [], [], 0
    for value_text, status in rows[1:]:
        value = float(value_text)
        if status == "crash" or value > BROKEN * best:
            fails += 1
            continue
        values.append(value)
        kept.append(status == "keep")
        if status == "keep":
            best = value
    return History(baseline, tuple(values), tuple(kept), fails)


def log_erfc(x: np.ndarray) -> np.ndarray:
    """log(erfc(x)), elementwise, to about 1e-7 relative (Numerical Recipes' Chebyshev fit of
    erfc, exact in its exponent, so no underflow for large x; for x < 0 from erfc(x) = 2 -
    erfc(-x))."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t
                    * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))
                )
            )
        )
    )
    log_positive = np.log(t) - z * z + poly
    return np.where(x >= 0, log_positive, np.log(2.0 - np.exp(log_positive)))


def log_emg(x: np.ndarray, sigma: float, rate: np.ndarray | float) -> np.ndarray:
    """log density at x of Exp(rate) + N(0, sigma^2), the exponentially modified Gaussian."""
    return (
        np.log(rate / 2)
        + rate / 2 * (rate * sigma * sigma - 2 * x)
        + log_erfc((rate * sigma * sigma - x) / (math.sqrt(2) * sigma))
    )


def log_normal(x: np.ndarray, sigma: float) -> np.ndarray:
    return -0.5 * (x / sigma) ** 2 - math.log(sigma * math.sqrt(2 * math.pi))


def component_logs(effects: Effects, residual: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """log(share * density of v - T) for null, harmful and good, rows in that order: the
    density of the residual r = v - T = delta + e under each part of the mixture."""
    total = effects.null + effects.harmful + effects.good
    good_rate = 1 / (effects.good_mean * np.exp(-np.maximum(gain, 0.0) / effects.depletion))
    return np.stack(
        [
            math.log(max(effects.null, 1e-300) / total) + log_normal(residual, effects.sigma),
            math.log(max(effects.harmful, 1e-300) / total)
            + log_emg(residual, effects.sigma, 1 / effects.harm_mean),
            math.log(max(effects.good, 1e-300) / total) + log_emg(-residual, effects.sigma, good_rate),
        ]
    )


def positive_normal(mean: np.ndarray, sd: float, rng: np.random.Generator) -> np.ndarray:
    """Draws of N(mean, sd^2) conditioned on > 0: plain rejection where that is likely, and
    Robert's (1995) exponential proposal in the far tail (mean below -sd)."""
    out = np.empty_like(mean)
    todo = np.arange(len(mean))
    while len(todo):
        m = mean[todo]
        a = np.maximum(-m / sd, 0.0)  # the truncation point in standard units
        tail = a > 1.0
        alpha = (a + np.sqrt(a * a + 4)) / 2
        proposal = np.where(tail, a + rng.exponential(1.0, len(todo)) / alpha, rng.standard_normal(len(todo)))
        accept = np.where(
            tail,
            rng.random(len(todo)) <= np.exp(-((proposal - alpha) ** 2) / 2),
            proposal > -m / sd,
        )
        out[todo[accept]] = np.where(tail, proposal * sd, m + proposal * sd)[accept]
        todo = todo[~accept]
    return out


def posterior_delta(
    effects: Effects, residual: np.ndarray, gain: np.ndarray, logs: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """A draw of delta given r = delta + e, per particle: a part of the mixture by its posterior
    weight, then delta within it (0; or, for an exponential with rate lambda, a normal with mean
    r - lambda sigma^2 truncated to its side)."""
    sigma2 = effects.sigma**2
    weights = np.exp(logs - logs.max(axis=0))
    cumulative = np.cumsum(weights, axis=0) / weights.sum(axis=0)
    part = (rng.random(residual.shape) > cumulative[:-1]).sum(axis=0)
    harm = positive_normal(residual - sigma2 / effects.harm_mean, effects.sigma, rng)
    good_rate = 1 / (effects.good_mean * np.exp(-np.maximum(gain, 0.0) / effects.depletion))
    good = -positive_normal(-residual - good_rate * sigma2, effects.sigma, rng)
    return np.choose(part, [np.zeros_like(residual), harm, good])


def log_likelihood(effects: Effects, history: History, particles: int = 4000, seed: int = 0) -> float:
    """The particle filter's estimate of log p(values | effects), the keeps given (module doc)."""
    rng = np.random.default_rng(seed)
    baseline = history.baseline + effects.sigma * rng.standard_normal(particles)
    best = baseline.copy()
    total = 0.0
    for value, kept in zip(history.values, history.kept, strict=True):
        residual, gain = value - best, baseline - best
        logs = component_logs(effects, residual, gain)
        top = logs.max(axis=0)
        log_weight = top + np.log(np.exp(logs - top).sum(axis=0))
        peak = float(log_weight.max())
        weights = np.exp(log_weight - peak)
        total += peak + math.log(float(weights.mean()))
        if kept:
            best = best + posterior_delta(effects, residual, gain, logs, rng)
        # Systematic resampling by the weights.
        positions = (rng.random() + np.arange(particles)) / particles
        chosen = np.minimum(np.searchsorted(np.cumsum(weights) / weights.sum(), positions), particles - 1)
        baseline, best = baseline[chosen], best[chosen]
    return total


def _unpack(theta: np.ndarray, history: History) -> Effects:
    """Unconstrained parameters -> Effects: softmax shares, logs of the positive scales."""
    weights = np.exp(np.array([0.0, theta[0], theta[1]]))
    null, harmful, good = weights / weights.sum()
    fail = history.fails / (len(history.values) + history.fails)
    return Effects(
        null=float(null) * (1 - fail),
        harmful=float(harmful) * (1 - fail),
        good=float(good) * (1 - fail),
        fail=fail,
        harm_mean=math.exp(theta[2]),
        good_mean=math.exp(theta[3]),
        depletion=math.exp(theta[4]),
        sigma=math.exp(theta[5]),
        experiments=len(history.values) + history.fails,
    )


def nelder_mead(
    f: Callable[[np.ndarray], float], start: np.ndarray, step: float = 0.5, iterations: int = 1500
) -> np.ndarray:
    """The minimum of f by the Nelder-Mead simplex (reflection 1, expansion 2, contraction and
    shrink 1/2), from `start` with a simplex of side `step`."""
    n = len(start)
    simplex = [start] + [start + step * np.eye(n)[i] for i in range(n)]
    values = [f(p) for p in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-6:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        r = f(reflected)
        if r < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            e = f(expanded)
            simplex[-1], values[-1] = (expanded, e) if e < r else (reflected, r)
        elif r < values[-2]:
            simplex[-1], values[-1] = reflected, r
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            c = f(contracted)
            if c < values[-1]:
                simplex[-1], values[-1] = contracted, c
            else:
                simplex = [simplex[0] + 0.5 * (p - simplex[0]) for p in simplex]
                values = [f(p) for p in simplex]
    return simplex[int(np.argmin(values))]


def fit(history: History, particles: int = 4000, starts: int = 8, seed: int = 0) -> Effects:
    """The maximum-likelihood mixture for a history: the best of `starts` Nelder-Mead searches,
    the first from scales read off the data (the spread of the discards, the measured gain), the
    others jittered around it."""
    discards = np.array([v for v, k in zip(history.values, history.kept, strict=True) if not k])
    spread = float(np.median(np.abs(discards - np.median(discards)))) / 0.6745
    base = np.array(
        [
            0.0,
            0.0,
            math.log(2 * spread),
            math.log(2 * spread),
            math.log(history.gain / 2),
            math.log(spread / 2),
        ]
    )

    def cost(theta: np.ndarray) -> float:
        if np.any(np.abs(theta[:2]) > 12):
            return math.inf
        value = -log_likelihood(_unpack(theta, history), history, particles, seed)
        return value if math.isfinite(value) else math.inf

    rng = np.random.default_rng(seed)
    best: tuple[float, np.ndarray] | None = None
    for i in range(starts):
        start = base if i == 0 else base + rng.normal(0, 0.8, size=len(base))
        theta = nelder_mead(cost, start)
        value = cost(theta)
        if best is None or value < best[0]:
            best = (value, theta)
    assert best is not None
    return replace(_unpack(best[1], history), log_likelihood=-best[0])


# The fit of the H100 history (`python -m bench.night_effects --history h100 --particles 2000
# --starts 6`, 2026-12-06, 3 min): the night's ideas (bench/research_night.py).
H100 = Effects(
    null=0.0654,
    harmful=0.3333,
    good=0.5853,
    fail=0.016,
    harm_mean=0.001962,
    good_mean=0.01720,
    depletion=0.006053,
    sigma=0.000398,
    log_likelihood=657.1,
    experiments=125,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", action="append", choices=sorted(HISTORIES), default=[])
    parser.add_argument("--particles", type=int, default=4000)
    parser.add_argument("--starts", type=int, default=8)
    args = parser.parse_args()
    for name in args.history or sorted(HISTORIES):
        history = read_history(HISTORIES[name])
        effects = fit(history, args.particles, args.starts)
        print(
            f"{name}: {len(history.values)} experiments with a value, {history.fails} failed, "
            f"{sum(history.kept)} kept, measured gain {history.gain:.4f}\n"
            f"  {effects.describe()}\n  {effects!r}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
