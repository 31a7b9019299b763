"""The noise estimate: each track's run-to-run sigma of val_bpb (on its platform and harness), kept
current.

It rests on the runs that were not chosen for being good, the measuring runs (`is_measuring`):
all of the baseline's, and the repeats of each kept change (the runs it got as the best). A
candidate's own runs are left out: its first run passed the screen because it was low, so its
spread around the candidate's mean is wider than the noise (the rule would then need more
evidence than it should).

On a fleet every run is first corrected by its worker's offset (`Fleet`, server/rules/worker_offsets.py),
fitted on the same measuring runs: runs of known code, never a candidate's. With one worker (or
WORKER_OFFSETS off) there are no offsets and the values are the runs' own. server/rules/worker_offsets.py
(numpy) is imported only where offsets are fitted: the CLI imports this module, and numpy's
threads must not start before `autoresearch work` blocks its stop signals (worker/signals.py).

Each new measuring run pools the track's again (`update_estimate`): server/rules/noise_pool.py, a
winsorized pooled sigma that one far-off run cannot blow up. The row stores it as sum_sq = df *
sigma^2 with its df, so readers take sigma = sqrt(sum_sq / df). The row is locked while its runs
are read and pooled, so concurrent results are pooled one after the other and none is left out.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, and_, bindparam, insert, or_, select, update
from sqlalchemy.orm import Session

from protocol.schemas import NoiseOut
from protocol.states import RunKind, RunState
from server.models import EXPERIMENTS, NOISE, RUNS, AnyRow, NoiseEstimate, Result, Worker, utcnow
from server.rules.judge import Noise, Provenance
from server.rules.noise_pool import pool

if TYPE_CHECKING:  # numpy, imported where offsets are fitted (`fleet`): module docstring
    from server.rules.worker_offsets import Measured, Offsets


@dataclass(frozen=True)
class RunStats:
    """An experiment's valid runs: count, mean and sum of squared deviations from the mean."""

    n: int
    mean: float | None
    m2: float

    def with_run(self, value: float) -> RunStats:
        n = self.n + 1
        mean = self.mean if self.mean is not None else value
        delta = value - mean
        new_mean = mean + delta / n
        return RunStats(n, new_mean, self.m2 + delta * (value - new_mean))


def is_measuring(baseline: bool, kind: str) -> bool:
    """Whether a run measures its commit without having been chosen for being good: any run of
    the baseline, a repeat (a run as the best) of any other. The noise and a best's value rest on
    these only (docs/api.md, "Decisions")."""
    return baseline or kind == RunKind.REPEAT


def measuring_clause(baseline: ColumnElement[bool]) -> ColumnElement[bool]:
    """`is_measuring` in SQL, on RUNS.c.kind."""
    return or_(baseline, RUNS.c.kind == RunKind.REPEAT)


def counted_clause() -> ColumnElement[bool]:
    """server.rules.judge.run_counts in SQL, on Result, for the platform and harness bound as
    `platform` and `harness_id` (never None here: the callers pass the track's, else the run's);
    a run presumed slowed (RunState.SLOWED: run again instead) does not count either."""
    return and_(
        Result.status == "ok",
        Result.val_bpb.is_not(None),
        Result.device == bindparam("platform"),
        Result.harness_id == bindparam("harness_id"),
    )


# A run presumed slowed (RunState.SLOWED, server/rules/judge.py, rerun) is not counted either.
_COUNTED = and_(counted_clause(), RUNS.c.status == RunState.FINISHED)
_RUN_COLUMNS = (Result.val_bpb, Result.worker_id, Result.received_at)
# One experiment's valid confirmation runs (those after its screening run).
_CONFIRMING = (
    select(*_RUN_COLUMNS)
    .join(RUNS, RUNS.c.id == Result.run_id)
    .where(Result.experiment_id == bindparam("experiment_id"), RUNS.c.kind == RunKind.CONFIRMATION, _COUNTED)
)
# One experiment's valid runs, of any kind.
_VALID = (
    select(*_RUN_COLUMNS)
    .join(RUNS, RUNS.c.id == Result.run_id)
    .where(Result.experiment_id == bindparam("experiment_id"), _COUNTED)
)
# One experiment's valid measuring runs: who made them, when, how fast the machine read.
_MEASURED_HOW = (
    select(Worker.name, Result.received_at, Result.conditions)
    .join(RUNS, RUNS.c.id == Result.run_id)
    .join(Worker, Worker.id == Result.worker_id)
    .where(
        Result.experiment_id == bindparam("experiment_id"),
        measuring_clause(bindparam("baseline")),
        _COUNTED,
    )
    .order_by(Result.received_at)
)
# Every valid measuring run of a track's experiments on a platform and harness.
_ALL_MEASURING = (
    select(Result.experiment_id, *_RUN_COLUMNS)
    .join(RUNS, RUNS.c.id == Result.run_id)
    .join(EXPERIMENTS, EXPERIMENTS.c.id == Result.experiment_id)
    .where(
        EXPERIMENTS.c.track_id == bindparam("track_id"),
        measuring_clause(EXPERIMENTS.c.base_commit.is_(None)),
        _COUNTED,
    )
    .order_by(Result.received_at)
)


# Measuring runs a worker needs before it is given an offset: one run's offset is its noise.
OFFSET_MIN_RUNS = 2


@dataclass(frozen=True)
class Fleet:
    """A track's valid measuring runs (experiment id: its runs), and its workers' offsets fitted on
    them (server/rules/worker_offsets.py): the runs of known code, so that every other run can be
    compared like with like whichever worker made it."""

    runs: dict[int, list[Measured]] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)  # worker id: its Measured.worker
    offsets: Offsets | None = None  # None: no offsets (one worker, or WORKER_OFFSETS off)

    @property
    def fitted(self) -> int:
        """Parameters the offsets took from the measuring runs: one per worker with an offset, less
        one (they centre on 0); noise_pool.pool takes as many degrees of freedom."""
        return len(self.offsets.times) - 1 if self.offsets is not None else 0

    def offset(self, worker_id: str, at: datetime) -> float:
        """The worker's offset at `at` (0 without offsets, or for a worker with no measuring run)."""
        if self.offsets is None:
            return 0.0
        return self.offsets.at(self.workers.get(worker_id, -1), at.timestamp())

    def corrected(self, rows: list[AnyRow]) -> list[float]:
        """Runs given as rows of (val_bpb, worker_id, received_at), each less its worker's offset."""
        return [row.val_bpb - self.offset(row.worker_id, row.received_at) for row in rows]

    def measured(self, experiment_id: int) -> list[float]:
        """The experiment's measuring runs, corrected."""
        offsets = self.offsets
        runs = self.runs.get(experiment_id, [])
        return [run.value - (offsets.at(run.worker, run.time) if offsets else 0.0) for run in runs]


def fleet(
    session: Session, track_id: int, platform: str | None, harness_id: str | None, half_life_h: float | None
) -> Fleet:
    """The track's measuring runs on its platform and harness, and the offsets fitted on the runs of
    the workers with OFFSET_MIN_RUNS of them or more (none with `half_life_h` None: WORKER_OFFSETS
    off)."""
    from server.rules.worker_offsets import Measured, worker_offsets

    if platform is None or harness_id is None:
        return Fleet()
    params = {"track_id": track_id, "platform": platform, "harness_id": harness_id}
    runs: defaultdict[int, list[Measured]] = defaultdict(list)
    workers: dict[str, int] = {}
    for row in session.connection().execute(_ALL_MEASURING, params):
        worker = workers.setdefault(row.worker_id, len(workers))
        runs[row.experiment_id].append(Measured(row.val_bpb, worker, row.received_at.timestamp()))
    if half_life_h is None:
        return Fleet(dict(runs), workers)
    made = Counter(run.worker for group in runs.values() for run in group)
    fitted = [[run for run in group if made[run.worker] >= OFFSET_MIN_RUNS] for group in runs.values()]
    offsets = worker_offsets([group for group in fitted if group], half_life_h)
    return Fleet(dict(runs), workers, offsets if offsets.times else None)


def provenance(
    session: Session, experiment_id: int, baseline: bool, platform: str | None, harness_id: str | None
) -> Provenance | None:
    """How the experiment's value was measured (its measuring runs), None before any."""
    params = {
        "experiment_id": experiment_id,
        "baseline": baseline,
        "platform": platform,
        "harness_id": harness_id,
    }
    rows = list(session.connection().execute(_MEASURED_HOW, params))
    if not rows:
        return None
    speeds = [row.conditions.get("speed_gflops") for row in rows if row.conditions]
    return Provenance(
        runs=len(rows),
        workers=tuple(dict.fromkeys(row.name for row in rows)),
        first=rows[0].received_at,
        last=rows[-1].received_at,
        speeds=tuple(speed for speed in speeds if speed is not None),
    )


def offsets_by_name(session: Session, measured: Fleet) -> dict[str, float]:
    """Each worker's offset now, by its name (empty without offsets)."""
    if measured.offsets is None:
        return {}
    workers = select(Worker.id, Worker.name).where(Worker.id.in_(list(measured.workers)))
    names = {row.id: row.name for row in session.execute(workers)}
    now = utcnow()
    return {
        names[worker_id]: measured.offset(worker_id, now)
        for worker_id, index in measured.workers.items()
        if index in measured.offsets.times and worker_id in names
    }


def valid_runs(
    session: Session, experiment_id: int, platform: str | None, harness_id: str | None, *, confirming: bool
) -> list[AnyRow]:
    """The experiment's valid runs (`confirming`: only its confirmation runs, those after the
    screening run, which alone chose it), as rows of (val_bpb, worker_id, received_at)."""
    params = {"experiment_id": experiment_id, "platform": platform, "harness_id": harness_id}
    return list(session.connection().execute(_CONFIRMING if confirming else _VALID, params))


_KEY = (
    NOISE.c.track_id == bindparam("t"),
    NOISE.c.platform == bindparam("p"),
    NOISE.c.harness_id == bindparam("h"),
)
_LOCK = select(NOISE.c.df).where(*_KEY).with_for_update()
_SET = (
    update(NOISE)
    .where(*_KEY)
    .values(
        sum_sq=bindparam("sum_sq"),
        df=bindparam("df"),
        runs=bindparam("runs"),
        experiments=bindparam("experiments"),
        updated_at=bindparam("now", type_=NOISE.c.updated_at.type),
    )
)
_INSERT = insert(NOISE)
_READ = select(NOISE.c.sum_sq, NOISE.c.df).where(*_KEY)


def update_estimate(
    session: Session, track_id: int, platform: str, harness_id: str, half_life_h: float | None
) -> None:
    """Pool every measuring run of the track on this platform and harness again (after a new one
    was recorded), each corrected by its worker's offset (`fleet`)."""
    connection = session.connection()
    key = {"t": track_id, "p": platform, "h": harness_id}
    exists = connection.execute(_LOCK, key).first() is not None
    measured = fleet(session, track_id, platform, harness_id, half_life_h)
    pooled = pool([measured.measured(experiment_id) for experiment_id in measured.runs], measured.fitted)
    if pooled is None:
        return  # no commit has two runs yet: nothing said about the noise
    columns = {
        "sum_sq": pooled.sigma**2 * pooled.df,
        "df": pooled.df,
        "runs": pooled.runs,
        "experiments": pooled.commits,
    }
    now = utcnow()
    if exists:
        connection.execute(_SET, columns | key | {"now": now})
    else:
        connection.execute(
            _INSERT,
            columns
            | {"track_id": track_id, "platform": platform, "harness_id": harness_id, "updated_at": now},
        )


def noise(session: Session, track_id: int, platform: str | None, harness_id: str | None) -> Noise | None:
    """The track's pooled estimate on a platform and harness, or None before any experiment has two
    runs."""
    if platform is None or harness_id is None:
        return None
    row = session.connection().execute(_READ, {"t": track_id, "p": platform, "h": harness_id}).first()
    if row is None or row.df < 1:
        return None
    return Noise(sigma=math.sqrt(max(row.sum_sq, 0.0) / row.df), df=row.df)


def estimates(
    session: Session,
    track_id: int,
    platform: str | None,
    harness_id: str | None,
    track: str,
    half_life_h: float | None,
) -> list[NoiseOut]:
    """Every platform and harness the track measured, its pins' (the one decisions use) marked
    current, with its workers' offsets."""
    offsets = offsets_by_name(session, fleet(session, track_id, platform, harness_id, half_life_h))
    rows = session.scalars(
        select(NoiseEstimate)
        .where(NoiseEstimate.track_id == track_id)
        .order_by(NoiseEstimate.platform, NoiseEstimate.harness_id)
    )
    views = []
    for e in rows:
        current = (e.platform, e.harness_id) == (platform, harness_id)
        views.append(view(e, current, track, offsets if current else None))
    return views


def view(
    estimate: NoiseEstimate, current: bool, track: str, offsets: dict[str, float] | None = None
) -> NoiseOut:
    return NoiseOut(
        offsets=offsets or {},
        track=track,
        platform=estimate.platform,
        harness_id=estimate.harness_id,
        sigma=math.sqrt(max(estimate.sum_sq, 0.0) / estimate.df) if estimate.df else None,
        df=estimate.df,
        runs=estimate.runs,
        experiments=estimate.experiments,
        current=current,
        updated_at=estimate.updated_at,
    )


def current_view(
    session: Session, track_id: int, platform: str | None, harness_id: str | None, track: str
) -> NoiseOut | None:
    """The estimate the track's decisions use now (on its platform and harness), if there is one."""
    if platform is None or harness_id is None:
        return None
    estimate = session.get(NoiseEstimate, (track_id, platform, harness_id))
    return view(estimate, True, track) if estimate is not None else None
