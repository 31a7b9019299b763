"""A research night: what verified improvement a night of GPU time buys, autoresearch's loop
against this server's, on a fleet with speed spread, drift and heavy-tailed noise (issue 52).

    python -m bench.research_night [--gpus 1,8,64] [--seeds 0,1,2] [--rules plain,offsets,...]
                                   [--ideas h100|stationary] [--noise gaussian|t3|tails]
                                   [--spread 0.02] [--drift 0.005] [--hours 8] [--set NAME=VALUE]
                                   [--plot docs/img/research_night.png] [--targets] [--replay]

Two loops on the same simulated fleet, the same ideas and the same noise model:

(a) autoresearch (its program.md): one agent per GPU, each on its own lineage. A run of the
    agent's change, kept when its val_bpb is below its best's (the real `judge` under the greedy
    rule with MIN_DELTA 0); the best's value is the run that got it kept. At the end one takes
    the GPU whose best measured lowest.
(b) this server: every GPU serves one queue, one lineage. The real `judge` (noise-aware rule,
    the server's settings) decides each run; the noise is `noise_pool.pool` over the measuring
    runs (the baseline's NOISE_RUNS, each kept change's BEST_REPEATS repeats), the best's value
    `noise_pool.bounded_mean`. The scheduling is the server's (server/flows/decisions.py, crud/leases.py):
    runs claimed in the order of their experiment's submission (a confirmation or repeat takes
    its experiment's place), the gate (only the baseline's runs until the noise rests on them),
    a change whose base is no longer the best re-applied onto the best before its first run and
    after a promising verdict (its confirmation runs kept as evidence), a change already in the
    best's lineage gone stale, and an identical change (the same idea on the same best) never
    run twice. The agents keep as many first runs queued as there are GPUs. `Corrections`
    (bench/night_rules.py) adds the fleet rules evaluated here; `plain` is today's server.

Ideas (`Catalogue`): CATALOGUE changes ranked by how promising agents find them, each null,
harmful, good or failing with the shares fitted to the H100 autoresearch history
(bench/night_effects.py), a good one's size falling with its rank as the fitted depletion says.
An agent proposes one of the WINDOW best-ranked changes it does not know to be tried: (a) every
change it tried; (b) the best's lineage, the changes reverted for measuring worse (a near miss
is proposed again on a later best) and, told of a duplicate, the changes queued on the best.
With `--ideas stationary` (and `--targets`) instead issue 12's endless mix (bench/decisions.py):
90 % null, 10 % improvements of 1, 2 and 3 sigma, each change new, no depletion.

A run's val_bpb = the true value of its train.py + its GPU's offset at that moment + noise:
- offset = -SLOPE * (the GPU's speed + a fleet-wide random walk + the GPU's own random walk):
  the speeds are N(0, spread) (fraction of tokens trained in the fixed budget), each walk's sd
  over a night (HOURS) is `drift`;
- noise: Gaussian with sd SIGMA; `t3`, Student's t with 3 df scaled to sd SIGMA; `tails`, a
  Gaussian core of sd SIGMA plus, in TAIL_SHARE of runs, a slow-down of mean TAIL_MEAN * SIGMA
  (only ever worse), so that the sd is 4.6 times the core's, as measured on `test` (20 seeds of
  one candidate: sd 0.174 against the pooled 0.038).

Verified improvement: the true val_bpb of the baseline minus that of the lineage's last keep,
per GPU-hour. A false keep: a kept change that is null or harmful, as a share of those proposed.
`--targets`: the server's keep rates by effect size on issue 12's mix (point 3 of issue 52).
`--replay`: the fit checked against the history it was fitted to.
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from bench.decisions import SIGMA
from bench.night_effects import H100, HISTORIES, Effects, read_history
from bench.night_rules import Corrections, best_out_of_limits, recent, slowed, windows
from protocol.states import Rule
from server.core.config import ServerSettings
from server.rules.judge import (
    Action,
    Evidence,
    JudgedRun,
    Noise,
    RuleSettings,
    Sample,
    Snapshot,
    Verdict,
    judge,
)
from server.rules.noise_pool import Pooled, bounded_mean, pool
from server.rules.worker_offsets import NO_OFFSETS, Measured, Offsets, corrected, worker_offsets

HOURS = 8.0  # a night
# One run's cycle on a worker at the h100 budget: 300 s of training + 28.9 s startup + 2.1 s
# scoring + 2.9 s runner (docs/benchmarks.md, "GPU check": the H200's worker cycle at a 20 s
# budget), about 334 s; 340 s with room for the h100 preset's longer score phase (its target is
# <= 350 s for a first run). The same cycle for both loops: autoresearch's own, 325.9 s in its
# program.md's example, plus the agent's thinking between runs, would be longer.
CYCLE_S = 340.0
# val_bpb per unit of log(tokens): a GPU 1 % slower trains 1 % fewer tokens in the budget and
# loses 0.001 val_bpb (issue 52: "a few percent is worth about 0.001-0.003 val_bpb on h100").
SLOPE = 0.1
BASELINE_BPB = 0.9979  # the H100 history's baseline
# Changes in the catalogue: more than 64 GPUs propose in a night (about 3,000 submissions), so no
# night runs out; its good changes are worth about 0.05-0.06 in all (Catalogue), the fitted
# depletion's law carried beyond the 125 experiments it was fitted on (they found 0.028).
CATALOGUE = 10_000
# An agent proposes one of the WINDOW most promising changes it has not tried, at random: agents
# share their priors (every fork's first keeps were batch-size and learning-rate changes), so a
# fleet's agents propose the same changes at once. An assumption: no history shows it.
WINDOW = 20
TAIL_SHARE = 0.05
TAIL_SD_RATIO = 0.174 / 0.038  # `test`: 20 seeds' sd against the pooled (winsorized) sigma
# Mean of the slow-down, in core sigmas, for that sd: 1 + TAIL_SHARE * (2 - TAIL_SHARE) * m^2 = ratio^2.
TAIL_MEAN = math.sqrt((TAIL_SD_RATIO**2 - 1) / (TAIL_SHARE * (2 - TAIL_SHARE)))
GRID_S = 60.0  # time step of the simulated drift
TARGET_EFFECTS = (0.0, 1.0, 2.0, 3.0)  # in sigmas (bench/decisions.py)
TARGET_SHARES = (0.9, 0.1 / 3, 0.1 / 3, 0.1 / 3)
FIRST, CONFIRMATION, REPEAT, BASELINE = "first", "confirmation", "repeat", "baseline"
MAX_RERUNS = 2  # runs of one experiment presumed slowed and run again, at most


@dataclass(frozen=True)
class Scenario:
    gpus: int
    hours: float = HOURS
    noise: str = "gaussian"  # gaussian, t3, tails
    sigma: float = SIGMA
    spread: float = 0.02  # sd of the GPUs' speeds, as a fraction of tokens
    drift: float = 0.005  # sd over a night of the fleet's random walk and of each GPU's
    cycle_s: float = CYCLE_S

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.hours


# --- the fleet and the noise ------------------------------------------------------------------


@dataclass(frozen=True)
class Fleet:
    """Each GPU's speed, and the random walks of the fleet and of each GPU on a time grid."""

    speed: np.ndarray
    common: np.ndarray
    walks: np.ndarray  # [gpu, step]

    def offset(self, gpu: int, t: float) -> float:
        """What this GPU adds to a run's val_bpb at time t (seconds): -SLOPE * its relative speed."""
        step = min(int(t / GRID_S), len(self.common) - 1)
        return -SLOPE * float(self.speed[gpu] + self.common[step] + self.walks[gpu, step])


def make_fleet(scenario: Scenario, rng: np.random.Generator) -> Fleet:
    steps = int(scenario.hours * 3600 / GRID_S) + 2
    per_step = scenario.drift * math.sqrt(GRID_S / (HOURS * 3600))  # `drift` is per night
    return Fleet(
        speed=rng.normal(0.0, scenario.spread, scenario.gpus),
        common=np.cumsum(rng.normal(0.0, per_step, steps)),
        walks=np.cumsum(rng.normal(0.0, per_step, (scenario.gpus, steps)), axis=1),
    )


def run_noise(kind: str, sigma: float, rng: np.random.Generator) -> float:
    """One run's error (module docstring: gaussian, t3, tails)."""
    if kind == "gaussian":
        return sigma * float(rng.standard_normal())
    if kind == "t3":
        return sigma * float(rng.standard_t(3)) / math.sqrt(3.0)
    assert kind == "tails", kind
    slow = float(rng.exponential(TAIL_MEAN * sigma)) if rng.random() < TAIL_SHARE else 0.0
    return sigma * float(rng.standard_normal()) + slow


# --- ideas ------------------------------------------------------------------------------------


class Ideas(Protocol):
    """Where the agents' changes come from."""

    kinds: tuple[str, ...]  # in report order
    null_kinds: frozenset[str]  # the kinds that do not improve val_bpb

    def propose(self, rng: np.random.Generator, excluded: Container[int]) -> int: ...
    def effect(self, idea: int) -> float | None: ...  # None: the run crashes
    def kind(self, idea: int) -> str: ...


class Catalogue:
    """CATALOGUE changes in the order agents find them promising (rank 1 first), each null,
    harmful, good or failing with the fitted shares, independently of its rank (module docstring).

    A good change's size is g(r) * Exp(1) with g(r) = good_mean / (1 + r / r0): the fit's
    depletion read as a ranking. One agent working down the list keeps its good changes; after r
    proposals its gain is G(r) = depletion * ln(1 + r / r0), r0 = depletion / (good share *
    good_mean), and the next good change's mean size g(r) = good_mean * exp(-G(r) / depletion)
    is the fitted f(G). Effects are fixed and add up, whatever the order they are kept in (a
    change re-applied onto a new best keeps its effect), and the catalogue's good changes are
    worth depletion * ln(1 + CATALOGUE / r0) in all: the most any night can find.
    """

    kinds: tuple[str, ...] = ("good", "null", "harmful", "fail")
    null_kinds: frozenset[str] = frozenset({"null", "harmful"})

    def __init__(self, effects: Effects, size: int, window: int, rng: np.random.Generator) -> None:
        shares = np.array([effects.good, effects.null, effects.harmful, effects.fail])
        shares = shares / shares.sum()
        self._kinds = rng.choice(len(self.kinds), size=size, p=shares)
        r0 = effects.depletion / (shares[0] * effects.good_mean)
        ranks = np.arange(1, size + 1)
        sizes = rng.exponential(1.0, size)
        self._effects = np.select(
            [self._kinds == 0, self._kinds == 2],
            [-effects.good_mean / (1 + ranks / r0) * sizes, effects.harm_mean * sizes],
            0.0,
        )
        self.window = window

    def propose(self, rng: np.random.Generator, excluded: Container[int]) -> int:
        """One of the `window` first-ranked changes not excluded, at random."""
        candidates: list[int] = []
        for idea in range(len(self._kinds)):
            if idea not in excluded:
                candidates.append(idea)
                if len(candidates) == self.window:
                    break
        if not candidates:
            raise RuntimeError("the catalogue is exhausted")
        return candidates[int(rng.integers(len(candidates)))]

    def effect(self, idea: int) -> float | None:
        return None if self.kind(idea) == "fail" else float(self._effects[idea])

    def kind(self, idea: int) -> str:
        return self.kinds[int(self._kinds[idea])]

    def headroom(self) -> float:
        """The sum of all good changes' effects (negative): the lowest val_bpb any lineage can reach."""
        return float(self._effects[self._kinds == 0].sum())


class Targets:
    """Issue 12's submissions: each a new change, null or an improvement of 1, 2 or 3 sigma."""

    kinds: tuple[str, ...] = ("3 sigma", "2 sigma", "1 sigma", "null")
    null_kinds: frozenset[str] = frozenset({"null"})

    def __init__(self, sigma: float, rng: np.random.Generator) -> None:
        self.sigma, self._rng, self._effects = sigma, rng, list[float]()

    def propose(self, rng: np.random.Generator, excluded: Container[int]) -> int:
        self._effects.append(TARGET_EFFECTS[int(self._rng.choice(4, p=TARGET_SHARES))])
        return len(self._effects) - 1

    def effect(self, idea: int) -> float | None:
        return -self._effects[idea] * self.sigma

    def kind(self, idea: int) -> str:
        size = self._effects[idea]
        return f"{size:.0f} sigma" if size else "null"


# --- outcomes ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    loop: str
    scenario: Scenario
    gain: float = 0.0  # true val_bpb: baseline - the lineage's last keep
    claimed: float = 0.0  # (a): the same as its runs measured it (its baseline's run - its best's)
    lineage: list[tuple[float, float]] = field(default_factory=list)  # (hour, true val_bpb) per keep
    proposed: Counter[str] = field(default_factory=Counter)  # submissions by kind
    kept: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    null_kinds: frozenset[str] = frozenset()

    @property
    def per_gpu_hour(self) -> float:
        return self.gain / self.scenario.gpu_hours

    @property
    def false_keeps(self) -> float:
        """Kept null or harmful changes, as a share of those proposed."""
        proposed = sum(self.proposed[k] for k in self.null_kinds)
        return sum(self.kept[k] for k in self.null_kinds) / max(1, proposed)

    def rate(self, kind: str) -> float:
        return self.kept[kind] / max(1, self.proposed[kind])

    @property
    def runs_per_submission(self) -> float:
        return self.runs.total() / max(1, self.proposed.total())


# --- (a) autoresearch's loop ------------------------------------------------------------------


def greedy_settings(settings: ServerSettings) -> RuleSettings:
    """autoresearch's rule as the server's greedy one: one run, keep when lower (MIN_DELTA 0)."""
    return replace(settings.rule, rule=Rule.GREEDY, min_delta=0.0)


@dataclass
class Agent:
    """One GPU's autoresearch lineage."""

    true: float
    value: float  # its best's measured value (the run that got it kept)
    baseline: float  # its baseline's measured value
    tried: set[int] = field(default_factory=set)  # every change it proposed (its results.tsv)
    lineage: list[tuple[float, float]] = field(default_factory=list)


def autoresearch(
    scenario: Scenario, ideas: Ideas, fleet: Fleet, settings: ServerSettings, rng: np.random.Generator
) -> Outcome:
    """Loop (a): every GPU its own agent and lineage, one run per change, keep when lower."""
    outcome = Outcome("autoresearch", scenario, null_kinds=ideas.null_kinds)
    rule = greedy_settings(settings)
    cycles = int(scenario.hours * 3600 // scenario.cycle_s)
    agents: list[Agent] = []
    for gpu in range(scenario.gpus):  # each agent's first run is its baseline
        value = (
            BASELINE_BPB
            + fleet.offset(gpu, scenario.cycle_s)
            + run_noise(scenario.noise, scenario.sigma, rng)
        )
        agents.append(Agent(BASELINE_BPB, value, value, lineage=[(0.0, BASELINE_BPB)]))
        outcome.runs[BASELINE] += 1
    for cycle in range(1, cycles):
        done = (cycle + 1) * scenario.cycle_s
        for gpu, agent in enumerate(agents):
            idea = ideas.propose(rng, agent.tried)
            agent.tried.add(idea)
            kind = ideas.kind(idea)
            outcome.proposed[kind] += 1
            outcome.runs[FIRST] += 1
            effect = ideas.effect(idea)
            if effect is None:
                continue  # crashed: discarded
            value = (
                agent.true + effect + fleet.offset(gpu, done) + run_noise(scenario.noise, scenario.sigma, rng)
            )
            verdict = judge(_greedy_snapshot(rule, value, agent.value))
            if verdict.action == Action.KEEP:
                agent.true, agent.value = agent.true + effect, value
                agent.lineage.append((done / 3600, agent.true))
                outcome.kept[kind] += 1
    chosen = min(agents, key=lambda a: a.value)  # the GPU whose best measured lowest
    outcome.gain = BASELINE_BPB - chosen.true
    outcome.claimed = chosen.baseline - chosen.value
    outcome.lineage = chosen.lineage
    return outcome


class _Union:
    """`in` for either of two sets, without copying them."""

    def __init__(self, *sets: Container[int]) -> None:
        self.sets = sets

    def __contains__(self, item: object) -> bool:
        return any(item in s for s in self.sets)


def _greedy_snapshot(rule: RuleSettings, value: float, best: float) -> Snapshot:
    return Snapshot(
        settings=rule,
        run=JudgedRun(1, "ok", None, value, "gpu", "harness"),
        platform="gpu",
        harness_id="harness",
        candidate=Sample(1, value),
        reference=Sample(1, best),
        reference_measured=True,
        reference_is_best=True,
        is_baseline=False,
        earlier=(),
        noise=None,
    )


# --- (b) the server ---------------------------------------------------------------------------


@dataclass
class Experiment:
    id: int
    idea: int
    base: int | None  # the experiment whose commit it was applied to; None: the baseline
    true: float | None  # its train.py's true val_bpb; None: it crashes
    queued_at: float
    submission: int
    rebased_from: int | None = None
    runs: list[Measured] = field(default_factory=list)  # its valid runs on its base
    measuring: list[Measured] = field(default_factory=list)  # as a best: the baseline's runs, repeats
    decided: str | None = None
    lineage: frozenset[int] = frozenset()  # the ideas in its train.py
    since: float = 0.0  # its value rests on its measuring runs from then (a control chart's cut)
    reruns: int = 0  # runs of it presumed slowed and run again (Corrections.rerun_slow)


class Server:
    """Loop (b): one queue, one lineage, the server's rule and scheduling (module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        ideas: Ideas,
        fleet: Fleet,
        settings: ServerSettings,
        corrections: Corrections,
        rng: np.random.Generator,
    ) -> None:
        self.scenario, self.ideas, self.fleet, self.settings = scenario, ideas, fleet, settings
        self.corrections, self.rng = corrections, rng
        self.outcome = Outcome("server", scenario, null_kinds=ideas.null_kinds)
        baseline = Experiment(0, -1, None, BASELINE_BPB, 0.0, -1)
        self.experiments = [baseline]
        self.best = 0
        self.outcome.lineage = [(0.0, BASELINE_BPB)]
        self.by_change: dict[tuple[int, int], int] = {}  # (idea, base) -> experiment: duplicates
        self.on_base: dict[int, set[int]] = defaultdict(set)  # base -> the ideas submitted on it
        self.queue: list[tuple[float, int, int, str]] = []  # (queued_at, order, experiment, kind)
        self.order = 0
        self.queued_first = 0
        self.submissions = 0
        # Changes reverted for measuring worse: the agents do not propose them again. A near miss
        # (reverted, measured better: GET /near-misses) they do, on a later best.
        self.reverted: set[int] = set()
        self.held = False  # a control chart holds keeps (night_rules.best_out_of_limits)
        self.holds = 0
        self.runs_of_worker: Counter[int] = Counter()
        self.now = 0.0
        self.measured_ids: list[int] = []  # the experiments with measuring runs
        self.measuring_count = 0
        self._pooled: tuple[int, Pooled | None, Offsets] | None = None
        for _ in range(settings.noise_runs):
            self._push(0.0, 0, BASELINE)

    # The queue.

    def _push(self, queued_at: float, experiment: int, kind: str) -> None:
        self.order += 1
        heapq.heappush(self.queue, (queued_at, self.order, experiment, kind))
        self.queued_first += kind == FIRST

    def _live(self, experiment: int, kind: str) -> bool:
        if kind in (REPEAT, BASELINE):
            return experiment == self.best  # a former best's queued repeats are cancelled
        return self.experiments[experiment].decided is None

    def _gate_open(self) -> bool:
        pooled = self.noise()
        return pooled is not None and pooled.df >= self.settings.noise_runs - 1

    def claim(self, worker: int, now: float) -> tuple[int, str] | None:
        """The first live queued run (only the best's while the gate is shut); a change whose base
        is a former best is re-applied onto the best first (server/flows/decisions.py,
        reapply_before_running)."""
        calibration = self._calibration(worker, now)
        if calibration is not None:
            return calibration
        skipped: list[tuple[float, int, int, str]] = []
        found = None
        while self.queue:
            item = heapq.heappop(self.queue)
            _, _, experiment, kind = item
            self.queued_first -= kind == FIRST
            if not self._live(experiment, kind):
                continue
            if not self._gate_open() and experiment != self.best:
                skipped.append(item)
                self.queued_first += kind == FIRST
                continue
            if kind == FIRST and self.experiments[experiment].base != self.best:
                self._rebase(self.experiments[experiment], now, before_running=True)
                continue
            found = (experiment, kind)
            break
        for item in skipped:
            heapq.heappush(self.queue, item)
        return found

    def _calibration(self, worker: int, now: float) -> tuple[int, str] | None:
        """A run of the best on this worker when one is due (Corrections.calibrate_every): its
        first run, then every `calibrate_every`-th once the gate is open."""
        every = self.corrections.calibrate_every
        if not every:
            return None
        runs = self.runs_of_worker[worker]
        if runs == 0 or (self._gate_open() and runs % every == 0):
            return (self.best, BASELINE if self.best == 0 else REPEAT)
        return None

    # The agents.

    def top_up(self, now: float) -> None:
        """The agents keep as many first runs queued as there are GPUs, each a change of the best
        that is neither in its lineage nor reverted for measuring worse (the agents read the
        project's history and its near misses, not its queue). One already submitted on the best
        is a duplicate: not run, and the agent, told so, proposes another."""
        best = self.experiments[self.best]
        while self.queued_first < self.scenario.gpus:
            idea = self.ideas.propose(self.rng, _Union(best.lineage, self.reverted))
            if (idea, self.best) in self.by_change:
                self.outcome.duplicates += 1
                on_best = self.on_base[self.best]
                idea = self.ideas.propose(self.rng, _Union(best.lineage, self.reverted, on_best))
            self.submissions += 1
            self.outcome.proposed[self.ideas.kind(idea)] += 1
            self._new(idea, best, now, self.submissions, None)

    def _new(
        self, idea: int, base: Experiment, queued_at: float, submission: int, rebased_from: int | None
    ) -> Experiment:
        assert base.true is not None
        effect = self.ideas.effect(idea)
        experiment = Experiment(
            len(self.experiments),
            idea,
            base.id,
            None if effect is None else base.true + effect,
            queued_at,
            submission,
            rebased_from,
            lineage=base.lineage | {idea},
        )
        self.experiments.append(experiment)
        self.by_change[(idea, base.id)] = experiment.id
        self.on_base[base.id].add(idea)
        self._push(queued_at, experiment.id, FIRST)
        return experiment

    def _rebase(self, experiment: Experiment, now: float, before_running: bool) -> None:
        """Its change onto the best: a new experiment in its place in the queue, unless the best
        already holds the change (stale) or the same change was submitted on it (its twin)."""
        experiment.decided = "rebased"
        best = self.experiments[self.best]
        if experiment.idea in best.lineage or (experiment.idea, self.best) in self.by_change:
            return
        self._new(experiment.idea, best, experiment.queued_at, experiment.submission, experiment.id)

    # The noise and the values, as the judge sees them.

    def noise(self) -> Pooled | None:
        return self._estimates()[0]

    def offsets(self) -> Offsets:
        return self._estimates()[1]

    def _estimates(self) -> tuple[Pooled | None, Offsets]:
        """The pooled noise and the workers' offsets, recomputed when a measuring run came in."""
        if self._pooled is None or self._pooled[0] != self.measuring_count:
            measured = [self.experiments[i].measuring for i in self.measured_ids]
            corrections = self.corrections
            offsets = (
                worker_offsets(measured, corrections.half_life_h, corrections.shrink)
                if corrections.offsets
                else NO_OFFSETS
            )
            hours = self.corrections.stale_hours
            pooled = pool([corrected(part, offsets) for runs in measured for part in windows(runs, hours)])
            self._pooled = (self.measuring_count, pooled, offsets)
        return self._pooled[1], self._pooled[2]

    def value_of(self, experiment: Experiment) -> Sample:
        """A best's value: its measuring runs' bounded mean (crud/evidence.py, _reference_sample);
        with Corrections.stale_hours, of its recent runs only (night_rules.recent)."""
        since = [run for run in experiment.measuring if run.time >= experiment.since]
        runs = recent(since, self.now, self.corrections.stale_hours, self.settings.best_repeats)
        values = corrected(runs, self.offsets())
        pooled = self.noise()
        if not values:
            return Sample(0, None)
        return Sample(len(values), bounded_mean(values, None if pooled is None else pooled.sigma))

    def snapshot(self, experiment: Experiment, run: Measured | None) -> Snapshot:
        values = corrected(experiment.runs, self.offsets())
        earlier = []
        ancestor = experiment.rebased_from
        while ancestor is not None:  # its confirmation runs on each former base (crud/evidence.py)
            former = self.experiments[ancestor]
            confirming = corrected(former.runs[1:], self.offsets())
            if confirming:
                assert former.base is not None
                earlier.append(
                    Evidence(
                        Sample(len(confirming), statistics.fmean(confirming)),
                        self.value_of(self.experiments[former.base]),
                    )
                )
            ancestor = former.rebased_from
        pooled = self.noise()
        assert experiment.base is not None
        return Snapshot(
            settings=self.settings.rule,
            run=JudgedRun(
                len(experiment.runs) + (run is None),
                "ok" if run is not None else "crash",
                None,
                None if run is None else corrected([run], self.offsets())[0],
                "gpu",
                "harness",
            ),
            platform="gpu",
            harness_id="harness",
            candidate=Sample(len(values), statistics.fmean(values) if values else None),
            reference=self.value_of(self.experiments[experiment.base]),
            reference_measured=True,
            reference_is_best=experiment.base == self.best,
            is_baseline=False,
            earlier=tuple(earlier),
            noise=None if pooled is None else Noise(pooled.sigma, pooled.df),
        )

    # Results.

    def record(self, worker: int, experiment_id: int, kind: str, now: float) -> None:
        self.now = now
        experiment = self.experiments[experiment_id]
        self.outcome.runs[kind] += 1
        self.runs_of_worker[worker] += 1
        if experiment.true is None:
            value = None
        else:
            noise = run_noise(self.scenario.noise, self.scenario.sigma, self.rng)
            value = experiment.true + self.fleet.offset(worker, now) + noise
        if value is not None and self._slowed(experiment, kind, Measured(value, worker, now)):
            self.outcome.runs["slowed"] += 1
            experiment.reruns += 1
            self._push(experiment.queued_at, experiment_id, kind)  # the same run again, in its place
            return
        if kind in (REPEAT, BASELINE):
            assert value is not None
            run = Measured(value, worker, now)
            if self.corrections.control and experiment_id == self.best:
                self._control(experiment, run)
            experiment.reruns = 0  # a best's runs: at most MAX_RERUNS slowed in a row
            if not experiment.measuring:
                self.measured_ids.append(experiment_id)
            experiment.measuring.append(run)
            self.measuring_count += 1
            return
        if experiment.decided is not None:
            return
        run_or_none = None if value is None else Measured(value, worker, now)
        if run_or_none is not None:
            experiment.runs.append(run_or_none)
        verdict = judge(self.snapshot(experiment, run_or_none))
        self._apply(experiment, verdict, now)

    def _slowed(self, experiment: Experiment, kind: str, run: Measured) -> bool:
        """Whether a run reads so much worse than what it is measured against (the best's value
        for its own runs, its base's for a candidate) that it was slowed (night_rules.slowed):
        then it is run again instead of counted, up to MAX_RERUNS times for a candidate (in a row
        for the best's runs)."""
        limit = self.corrections.rerun_slow
        if not limit or experiment.reruns >= MAX_RERUNS:
            return False
        pooled = self.noise()
        against = experiment if kind in (REPEAT, BASELINE) else self.experiments[experiment.base or 0]
        reference = self.value_of(against)
        value = corrected([run], self.offsets())[0]
        return slowed(value, reference.mean, None if pooled is None else pooled.sigma, limit)

    def _control(self, best: Experiment, run: Measured) -> None:
        """The control chart on the best's runs (night_rules.best_out_of_limits): a run out of
        limits holds keeps and starts the best's value afresh from it, with BEST_REPEATS - 1
        more repeats queued; keeps resume once the fresh value rests on BEST_REPEATS runs."""
        pooled = self.noise()
        fresh = [r for r in best.measuring if r.time >= best.since]
        if self.held and len(fresh) + 1 >= self.settings.best_repeats:
            self.held = False
        if pooled is None or len(fresh) < 2 or self.held:
            return
        offsets = self.offsets()
        if best_out_of_limits(
            corrected(fresh, offsets), corrected([run], offsets)[0], pooled.sigma, self.corrections.control
        ):
            self.held = True
            self.holds += 1
            best.since = run.time
            for _ in range(self.settings.best_repeats - 1):
                self._push(best.queued_at, best.id, REPEAT)

    def _apply(self, experiment: Experiment, verdict: Verdict, now: float) -> None:
        action = verdict.action
        if action == Action.KEEP and self.held:
            action = Action.CONFIRM if len(experiment.runs) < self.settings.max_runs else Action.REVERT
        if action == Action.KEEP:
            experiment.decided = "kept"
            self.best = experiment.id
            assert experiment.true is not None
            self.outcome.lineage.append((now / 3600, experiment.true))
            self.outcome.kept[self.ideas.kind(experiment.idea)] += 1
            for _ in range(self.settings.best_repeats):
                self._push(experiment.queued_at, experiment.id, REPEAT)
        elif action == Action.CONFIRM:
            self._push(experiment.queued_at, experiment.id, CONFIRMATION)
        elif action == Action.REBASE:
            self._rebase(experiment, now, before_running=False)
        else:
            experiment.decided = "reverted"
            comparison = verdict.comparison
            t = None if comparison is None else comparison.t
            if t is None or t >= self.corrections.near_miss_t:
                self.reverted.add(experiment.idea)  # a near miss stays proposable

    def run(self) -> Outcome:
        """The night, in simulated time: claims, runs and results until the night is over."""
        end = self.scenario.hours * 3600
        in_flight: list[tuple[float, int, int, int, str]] = []
        idle = list(range(self.scenario.gpus))
        now, order = 0.0, 0
        while True:
            self.top_up(now)
            for worker in list(idle):
                claimed = self.claim(worker, now)
                if claimed is not None:
                    idle.remove(worker)
                    order += 1
                    done = now + self.scenario.cycle_s * (1 + 0.01 * float(self.rng.uniform(-1, 1)))
                    heapq.heappush(in_flight, (done, order, worker, *claimed))
            if not in_flight or in_flight[0][0] > end:
                break
            now, _, worker, experiment, kind = heapq.heappop(in_flight)
            self.record(worker, experiment, kind, now)
            idle.append(worker)
        final = self.experiments[self.best].true
        assert final is not None
        self.outcome.gain = BASELINE_BPB - final
        return self.outcome


# --- one night, both loops --------------------------------------------------------------------


def night(
    scenario: Scenario,
    seed: int,
    settings: ServerSettings,
    corrections: Corrections,
    ideas_from: str = "h100",
    loops: Iterable[str] = ("autoresearch", "server"),
) -> dict[str, Outcome]:
    """Both loops on the same fleet and the same ideas (each loop its own noise draws): the
    catalogue fitted to the H100 history (`h100`), or issue 12's endless mix (`stationary`)."""
    fleet = make_fleet(scenario, np.random.default_rng([seed, 0]))
    outcomes = {}
    for i, loop in enumerate(loops, start=1):
        ideas: Ideas = (
            Targets(scenario.sigma, np.random.default_rng([seed, 1, i]))
            if ideas_from == "stationary"
            else Catalogue(H100, CATALOGUE, WINDOW, np.random.default_rng([seed, 1]))
        )
        rng = np.random.default_rng([seed, 2, i])
        if loop == "autoresearch":
            outcomes[loop] = autoresearch(scenario, ideas, fleet, settings, rng)
        else:
            outcomes[loop] = Server(scenario, ideas, fleet, settings, corrections, rng).run()
    return outcomes


def worst(values: Sequence[float], higher_is_better: bool = True) -> float:
    return min(values) if higher_is_better else max(values)


def span(values: Sequence[float], form: str) -> str:
    return f"{min(values):{form}}-{max(values):{form}}"


def report_nights(
    scenarios: Sequence[Scenario],
    seeds: Sequence[int],
    settings: ServerSettings,
    corrections: dict[str, Corrections],
    ideas_from: str,
) -> dict[tuple[int, str], list[dict[str, Outcome]]]:
    """The night's figures per GPU count: each loop's verified improvement per GPU-hour and its
    false keeps, over the seeds (worst of them first, then the range)."""
    results = {}
    for scenario in scenarios:
        for name, correction in corrections.items():
            started = time.perf_counter()
            nights = [night(scenario, seed, settings, correction, ideas_from) for seed in seeds]
            results[(scenario.gpus, name)] = nights
            auto = [n["autoresearch"] for n in nights]
            server = [n["server"] for n in nights]
            ratios = [s.gain / a.gain if a.gain > 0 else math.inf for a, s in zip(auto, server, strict=True)]
            print(
                f"{scenario.gpus:>3} GPUs, {name}: "
                f"(a) {worst([o.per_gpu_hour for o in auto]):.2e}/GPU-h "
                f"[{span([o.gain for o in auto], '.4f')}], false keeps "
                f"{worst([o.false_keeps for o in auto], False):.1%}; "
                f"(b) {worst([o.per_gpu_hour for o in server]):.2e}/GPU-h "
                f"[{span([o.gain for o in server], '.4f')}], false keeps "
                f"{worst([o.false_keeps for o in server], False):.1%}, "
                f"{span([o.runs_per_submission for o in server], '.2f')} runs/submission, "
                f"duplicates {span([o.duplicates for o in server], 'd')}; "
                f"(b)/(a) worst {min(ratios):.2f} [{time.perf_counter() - started:.0f} s]",
                flush=True,
            )
    return results


def report_targets(
    scenario: Scenario, seeds: Sequence[int], settings: ServerSettings, corrections: dict[str, Corrections]
) -> None:
    """Issue 12's targets on this fleet: the server's keep rates by effect size, worst of seeds."""
    for name, correction in corrections.items():
        started = time.perf_counter()
        outs = [
            night(scenario, s, settings, correction, "stationary", loops=("server",))["server"] for s in seeds
        ]
        print(
            f"targets, {scenario.gpus} GPUs, {name}: null kept {max(o.rate('null') for o in outs):.1%}, "
            f"1 sigma {min(o.rate('1 sigma') for o in outs):.1%}, "
            f"2 sigma {min(o.rate('2 sigma') for o in outs):.1%}, "
            f"3 sigma {min(o.rate('3 sigma') for o in outs):.1%}, "
            f"runs/submission {max(o.runs_per_submission for o in outs):.2f} "
            f"({sum(o.proposed.total() for o in outs)} submissions) "
            f"[{time.perf_counter() - started:.0f} s]",
            flush=True,
        )


def replay(seeds: Sequence[int], settings: ServerSettings) -> None:
    """The fit checked against its history: one agent, one GPU, no spread or drift, the H100
    history's noise (the fitted sigma) and length (125 experiments after the baseline), on
    catalogues drawn from the fit; its keeps and measured gain against the history's 22 and 0.0282."""
    history = read_history(HISTORIES["h100"])
    experiments = len(history.values) + history.fails
    scenario = Scenario(1, (experiments + 1.5) * CYCLE_S / 3600, "gaussian", H100.sigma, 0.0, 0.0)
    outs = []
    for seed in seeds:
        fleet = make_fleet(scenario, np.random.default_rng([seed, 0]))
        ideas = Catalogue(H100, CATALOGUE, WINDOW, np.random.default_rng([seed, 1]))
        outs.append(autoresearch(scenario, ideas, fleet, settings, np.random.default_rng([seed, 2])))
    keeps = [o.kept.total() for o in outs]
    print(
        f"replay of the H100 history ({experiments} experiments, {len(seeds)} catalogues): keeps "
        f"median {statistics.median(keeps):g} (range {min(keeps)}-{max(keeps)}; "
        f"history {sum(history.kept)}), "
        f"measured gain median {statistics.median(o.claimed for o in outs):.4f} "
        f"(range {span([o.claimed for o in outs], '.4f')}; history {history.gain:.4f}), true gain median "
        f"{statistics.median(o.gain for o in outs):.4f}",
        flush=True,
    )


RULES: dict[str, Corrections] = {
    "plain": Corrections(),  # today's server
    "calibrated": Corrections(calibrate_every=8),  # every worker measures the best, no correction
    "offsets": Corrections(offsets=True, calibrate_every=4, half_life_h=2.0),
    "corrected": Corrections(offsets=True, calibrate_every=4, half_life_h=2.0, stale_hours=1.0, control=3.0),
    # offsets, and a run more than 3 sigma worse than its reference is run again (slowed)
    "offsets+rerun": Corrections(offsets=True, calibrate_every=4, half_life_h=2.0, rerun_slow=3.0),
    # offsets, and near misses widened to t < 1 (a change screened out by one unlucky run)
    "offsets+near": Corrections(offsets=True, calibrate_every=4, half_life_h=2.0, near_miss_t=1.0),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="1,8,64")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--hours", type=float, default=HOURS)
    parser.add_argument("--noise", default="gaussian", choices=["gaussian", "t3", "tails"])
    parser.add_argument("--spread", type=float, default=0.02)
    parser.add_argument("--drift", type=float, default=0.005)
    parser.add_argument("--ideas", default="h100", choices=["h100", "stationary"])
    parser.add_argument("--rules", default="plain", help=f"comma-separated, of {', '.join(RULES)}")
    parser.add_argument("--targets", action="store_true", help="issue 12's submissions instead of a night")
    parser.add_argument("--replay", action="store_true", help="check the fit against the H100 history")
    parser.add_argument("--plot", type=Path, help="a PNG of the first seed's lineages, under the last rule")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    overrides = {name.lower(): value for name, value in (item.split("=", 1) for item in args.set)}
    settings = ServerSettings(data_dir=Path(tempfile.gettempdir()), **overrides)
    seeds = [int(s) for s in args.seeds.split(",")]
    corrections = {name: RULES[name] for name in args.rules.split(",")}
    scenarios = [
        Scenario(int(g), args.hours, args.noise, SIGMA, args.spread, args.drift) for g in args.gpus.split(",")
    ]
    if args.replay:
        replay(seeds, settings)
        return 0
    print(
        f"== {args.hours:g} h, noise {args.noise} (sigma {SIGMA}), GPU speed sd {args.spread:.1%}, "
        f"drift sd {args.drift:.1%} a night, cycle {CYCLE_S:g} s, ideas {args.ideas}, seeds {args.seeds}; "
        + (", ".join(f"{k.upper()}={v}" for k, v in overrides.items()) or "default settings"),
        flush=True,
    )
    if args.targets:
        for scenario in scenarios:
            report_targets(scenario, seeds, settings, corrections)
        return 0
    results = report_nights(scenarios, seeds, settings, corrections, args.ideas)
    if args.plot:
        from bench.night_plot import plot_lineages

        plot_lineages(results, 0, args.plot, args.hours, list(corrections)[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
