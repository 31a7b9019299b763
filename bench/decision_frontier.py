"""Where the noise-aware rule loses its real improvements: a fast model for designing the rule.

    python -m bench.decision_frontier [--submissions 10000] [--seeds 0,1000,2000] [--noise gaussian]
                                      [--set NAME=VALUE ...]

bench/decisions.py is the proof of issue #12's targets: the real queue, database and git, four
workers, 3,000 submissions in minutes. This is its fast companion: one worker, no database, no
git, so each decision is made the moment its run is in and 10,000 submissions take seconds. Where
the decision is made it uses the real parts: `judge` (server/rules/judge.py) decides every run, and the
noise it is given is `noise_pool.pool` over the same measuring runs the server pools (the
baseline's NOISE_RUNS runs, the BEST_REPEATS repeats of every kept change, one more run of the
best every BEST_RERUN_EVERY submissions), recomputed whenever one is added; the best's value is
theirs, `noise_pool.bounded_mean`, as server/flows/decisions.py makes it. Submissions and noise
are bench/decisions.py's: 90 % null changes, 10 % real improvements of 1, 2 and 3 sigma.

It prints, for each effect size, how its submissions ended: kept, or reverted after 1 run (the
screen), 2, 3... runs; the runs per submission; and the error of the best's value as the
candidates met it (the best's mean minus its true value, in sigmas), twice:

- `as run`: a best whose repeats came out low by luck turns most candidates away, so it stays the
  best longer and meets more of them than an unlucky one, which the next real improvement soon
  replaces. The candidates meet bests that look better than they are.
- `fresh`: the same submissions with the best's runs drawn anew for every candidate (the same
  number of them), so that no best meets more candidates for its luck: what the rule would do
  if the best's error did not stay with it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.decisions import EFFECTS, HARNESS_ID, PLATFORM, SHARES, SIGMA, TARGETS, unit_noise
from server.core.config import ServerSettings
from server.rules.judge import Action, JudgedRun, Noise, Sample, Snapshot, judge
from server.rules.noise_pool import Pooled, bounded_mean, pool


@dataclass
class Tally:
    ended: dict[float, Counter[str]] = field(default_factory=lambda: {e: Counter() for e in EFFECTS})
    runs: Counter[str] = field(default_factory=Counter)  # by kind: first, confirmation, repeat
    best_errors: list[float] = field(default_factory=list)  # in sigmas, one per candidate

    def rate(self, effect: float, how: str = "kept") -> float:
        return self.ended[effect][how] / max(1, self.ended[effect].total())

    @property
    def submitted(self) -> int:
        return sum(c.total() for c in self.ended.values())

    @property
    def runs_per_submission(self) -> float:
        return self.runs.total() / max(1, self.submitted)


@dataclass
class Platform:
    noise: str
    rng: np.random.Generator

    def draw(self, true: float) -> float:
        return true + SIGMA * unit_noise(self.noise, self.rng)


def simulate(settings: ServerSettings, noise: str, submissions: int, seed: int, fresh: bool) -> Tally:
    """One project from its baseline through `submissions` submissions, each decided in turn."""
    platform = Platform(noise, np.random.default_rng(seed))
    kinds = np.random.default_rng(seed + 1).choice(len(EFFECTS), size=submissions, p=SHARES)
    tally = Tally()
    best_true, best_runs = 1.0, [platform.draw(1.0) for _ in range(settings.noise_runs)]
    measured = [best_runs]  # every best's measuring runs: what the noise is pooled over
    pooled = pool(measured)
    since = 0  # submissions since the best became the best
    for kind in kinds:
        effect = EFFECTS[kind]
        since += 1
        if settings.best_rerun_every and since % settings.best_rerun_every == 0:
            best_runs.append(platform.draw(best_true))
            tally.runs["repeat"] += 1
            pooled = pool(measured)
        against = [platform.draw(best_true) for _ in best_runs] if fresh else best_runs
        value = bounded_mean(against, None if pooled is None else pooled.sigma)
        reference = Sample(len(against), value)
        tally.best_errors.append((value - best_true) / SIGMA)
        true = best_true - effect * SIGMA
        values: list[float] = []
        while True:
            values.append(platform.draw(true))
            tally.runs["first" if len(values) == 1 else "confirmation"] += 1
            verdict = judge(_snapshot(settings, values, reference, pooled))
            if verdict.action != Action.CONFIRM:
                break
        if verdict.action == Action.KEEP:
            tally.ended[effect]["kept"] += 1
            best_true, best_runs, since = true, [platform.draw(true) for _ in range(settings.best_repeats)], 0
            tally.runs["repeat"] += settings.best_repeats
            measured.append(best_runs)
            pooled = pool(measured)
        else:
            tally.ended[effect][f"after {len(values)}"] += 1
    return tally


def _snapshot(
    settings: ServerSettings, values: list[float], reference: Sample, pooled: Pooled | None
) -> Snapshot:
    noise = None if pooled is None else Noise(pooled.sigma, pooled.df)
    return Snapshot(
        settings=settings.rule,
        run=JudgedRun(len(values), "ok", None, values[-1], PLATFORM, HARNESS_ID),
        platform=PLATFORM,
        harness_id=HARNESS_ID,
        candidate=Sample(len(values), statistics.fmean(values)),
        reference=reference,
        reference_measured=True,
        reference_is_best=True,
        is_baseline=False,
        earlier=(),
        noise=noise,
    )


def span(values: list[float], form: str) -> str:
    """`low-high` of a figure over the seeds."""
    return f"{min(values):{form}}-{max(values):{form}}"


def report(name: str, tallies: list[Tally], max_runs: int) -> None:
    print(f"  {name}:")
    for effect in EFFECTS:
        cells = "  ".join(
            f"{how} {span([t.rate(effect, how) for t in tallies], '.1%')}"
            for how in ["kept"] + [f"after {n}" for n in range(1, max_runs + 1)]
        )
        print(f"    {effect:.0f} sigma: {cells}")
    kinds = "  ".join(
        f"{kind} {span([t.runs[kind] / max(1, t.submitted) for t in tallies], '.2f')}"
        for kind in ("first", "confirmation", "repeat")
    )
    errors = [e for t in tallies for e in t.best_errors]
    print(
        f"    runs per submission {span([t.runs_per_submission for t in tallies], '.2f')} ({kinds})\n"
        f"    the best's error as the candidates met it: mean {statistics.fmean(errors):+.3f} sigma, "
        f"sd {statistics.pstdev(errors):.3f}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=10_000)
    parser.add_argument("--seeds", default="0,1000,2000")
    parser.add_argument("--noise", default="gaussian", choices=["gaussian", "t3"])
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    overrides = {name.lower(): value for name, value in (item.split("=", 1) for item in args.set)}
    settings = ServerSettings(
        data_dir=Path(tempfile.gettempdir()), **overrides
    )  # validated as the server does
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"== {args.noise} noise, {args.submissions} submissions, seeds {args.seeds}; "
        + (", ".join(f"{k.upper()}={v}" for k, v in overrides.items()) or "default settings")
        + f"; ranges over the seeds (targets: {', '.join(f'{k} {v}' for k, v in TARGETS.items())})"
    )
    for fresh in (False, True):
        started = time.perf_counter()
        tallies = [simulate(settings, args.noise, args.submissions, seed, fresh) for seed in seeds]
        report(
            f"{'fresh' if fresh else 'as run'} ({time.perf_counter() - started:.0f} s)",
            tallies,
            settings.max_runs,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
